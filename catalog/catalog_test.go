package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// evidenceHeaders returns headers as a consumer writes them when it
// dead-letters: the original headers plus Lily's evidence.
func evidenceHeaders(reason evidence.Reason, errType, errMsg, version string, delivery, retries, redrives int) transport.Headers {
	h := transport.Headers{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "app": []byte("x")}
	evidence.Record{
		Reason:          reason,
		ErrorType:       errType,
		ErrorMessage:    errMsg,
		Source:          "sqlite/orders.created",
		SourceMessageID: "17",
		DeliveryCount:   delivery,
		RetryCount:      retries,
		RedriveCount:    redrives,
		FirstFailureAt:  testNow.Add(-time.Minute),
		LastFailureAt:   testNow,
		DeadLetteredAt:  testNow,
		Consumer:        "orders-worker",
		ConsumerVersion: version,
		Host:            "host-1",
	}.Apply(h)
	return h
}

func entry(queue, id string, reason evidence.Reason, state State, msg string) *Entry {
	h := evidenceHeaders(reason, "*json.SyntaxError", msg, "v1.2.3", 1, 0, 0)
	e := NewEntry(queue, transport.Message{EventID: id, Key: "k-" + id, Type: "order.created", Body: []byte(`{"id":"` + id + `"}`)},
		h, string(reason), testNow)
	e.State = state
	return e
}

func TestNewEntryFromEvidence(t *testing.T) {
	body := []byte(`{"order":42,` + "\x00\xff")
	h := evidenceHeaders(evidence.ReasonRetriesExhausted, "*net.OpError", "dial tcp 10.0.0.7:5432: connection refused", "v2.0.1", 3, 4, 1)
	m := transport.Message{EventID: "evt-1", Key: "customer-9", Type: "order.created", Body: body}
	local := time.Date(2026, 11, 29, 15, 0, 0, 0, time.FixedZone("TRT", 3*3600))
	e := NewEntry("orders.created", m, h, "", local)

	sum := sha256.Sum256(body)
	want := &Entry{
		Queue: "orders.created", EventID: "evt-1", Key: "customer-9", Type: "order.created",
		Body: body, Headers: h, BodySHA256: hex.EncodeToString(sum[:]),
		Reason:          "retries_exhausted", // from the header when not given
		ErrorType:       "*net.OpError",
		ErrorMessage:    "dial tcp 10.0.0.7:5432: connection refused",
		Fingerprint:     evidence.Fingerprint("dial tcp 10.0.0.7:5432: connection refused"),
		ConsumerVersion: "v2.0.1",
		Source:          "sqlite/orders.created",
		DeliveryCount:   3, RetryCount: 4, RedriveCount: 1,
		State:          StatePending,
		DeadLetteredAt: testNow, UpdatedAt: testNow,
		HoldKey: "customer-9", // what a parked copy would wait behind: its key
	}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("NewEntry:\n got %+v\nwant %+v", e, want)
	}
	if e.Fingerprint == e.ErrorMessage || !strings.Contains(e.Fingerprint, "<n>") {
		t.Errorf("fingerprint %q does not normalise the numbers", e.Fingerprint)
	}
	if e.DeadLetteredAt.Location() != time.UTC {
		t.Errorf("DeadLetteredAt in %v, want UTC", e.DeadLetteredAt.Location())
	}
	// A given reason wins over the header's.
	if e := NewEntry("q", m, h, "delivery_limit", testNow); e.Reason != "delivery_limit" {
		t.Errorf("Reason = %q, want the given delivery_limit", e.Reason)
	}
	// Without evidence: the source is the queue, counts are zero.
	bare := NewEntry("orders.created", transport.Message{EventID: "evt-2"}, nil, "permanent", testNow)
	empty := sha256.Sum256(nil)
	if bare.Source != "orders.created" || bare.ErrorType != "" || bare.DeliveryCount != 0 ||
		bare.BodySHA256 != hex.EncodeToString(empty[:]) || bare.State != StatePending {
		t.Errorf("entry without evidence: %+v", bare)
	}
}

func TestInsertGetRoundTrip(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		h := evidenceHeaders(evidence.ReasonPermanent, "*json.SyntaxError", "invalid character 'x'", "v1", 2, 0, 0)
		h["x-retry-count-as-text"] = "0"
		h["x-int64"] = int64(7)
		e := NewEntry("orders.created", transport.Message{EventID: "evt-1", Key: "k", Type: "t", Body: []byte{0, 1, 2}},
			h, "permanent", testNow.Add(123*time.Millisecond+456*time.Microsecond))
		if err := s.Insert(ctx, e); err != nil {
			t.Fatalf("Insert: %v", err)
		}
		if e.ID == 0 {
			t.Fatal("Insert did not set the ID")
		}
		got, err := s.Get(ctx, e.ID)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		want := *e
		want.DeadLetteredAt = e.DeadLetteredAt.Truncate(time.Millisecond)
		want.UpdatedAt = e.UpdatedAt.Truncate(time.Millisecond)
		want.BodySize, want.HeadersSize = int64(len(e.Body)), got.HeadersSize
		if got.HeadersSize < 100 {
			t.Errorf("HeadersSize %d: want the stored headers' size", got.HeadersSize)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("Get:\n got %+v\nwant %+v", got, &want)
		}
		// Header types survive storage (int32 stays int32, "0" stays text).
		if _, ok := got.Headers[evidence.HeaderDeliveryCount].(int32); !ok {
			t.Errorf("delivery count header is %T, want int32", got.Headers[evidence.HeaderDeliveryCount])
		}
		if got.Headers["x-retry-count-as-text"] != "0" {
			t.Errorf("text header = %#v", got.Headers["x-retry-count-as-text"])
		}
	})
}

func TestInsertRejectsUnstorableHeaders(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		good := entry("q", "good", evidence.ReasonPermanent, StatePending, "x")
		bad := entry("q", "bad", evidence.ReasonPermanent, StatePending, "x")
		bad.Headers["x-bad"] = struct{}{}
		err := s.Insert(ctx, good, bad)
		if err == nil || !strings.Contains(err.Error(), "x-bad") {
			t.Fatalf("Insert = %v, want an error naming x-bad", err)
		}
		n := 0
		if err := s.Each(ctx, Filter{}, func(*Entry) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d entries stored after a failed Insert, want 0 (one transaction)", n)
		}
	})
}

func TestGetMissing(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		_, err := s.Get(context.Background(), 4242)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(4242) = %v, want ErrNotFound", err)
		}
		if !strings.Contains(err.Error(), "4242") {
			t.Errorf("error does not name the ID: %v", err)
		}
	})
}

func seed(t *testing.T, s *Store) []*Entry {
	t.Helper()
	es := []*Entry{
		entry("orders.created", "e1", evidence.ReasonPermanent, StatePending, `invalid character 'x' at offset 12`),
		entry("orders.created", "e2", evidence.ReasonRetriesExhausted, StatePending, "timeout after 30s"),
		entry("payments", "e3", evidence.ReasonPermanent, StateParked, `invalid character 'y' at offset 99`),
		entry("orders.created", "e4", evidence.ReasonDeliveryLimit, StateRedriven, "delivered 6 times"),
		entry("orders.created", "e5", evidence.ReasonPermanent, StateDiscarded, `invalid character 'z' at offset 1`),
		entry("payments", "e6", evidence.ReasonPermanent, StateNeedsManual, "x"),
		entry("orders.created", "e7", evidence.ReasonPermanent, StateErased, "x"),
	}
	es[1].ErrorType = "*lily.TimeoutError"
	es[5].ConsumerVersion = "v9"
	if err := s.Insert(context.Background(), es...); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	return es
}

func TestEachFilters(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		tests := []struct {
			name string
			f    Filter
			want []string
		}{
			{"all", Filter{}, []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"}},
			{"queue", Filter{Queue: "payments"}, []string{"e3", "e6"}},
			{"state", Filter{States: []State{StatePending}}, []string{"e1", "e2"}},
			{"states", Filter{States: []State{StateParked, StateRedriven, StateErased}}, []string{"e3", "e4", "e7"}},
			{"reason", Filter{Reason: "permanent"}, []string{"e1", "e3", "e5", "e6", "e7"}},
			{"queue state reason", Filter{Queue: "orders.created", States: []State{StatePending, StateDiscarded}, Reason: "permanent"}, []string{"e1", "e5"}},
			{"no match", Filter{Queue: "nope"}, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var got []string
				var last int64
				err := s.Each(ctx, tt.f, func(e *Entry) error {
					if e.ID <= last {
						t.Errorf("IDs not ascending: %d after %d", e.ID, last)
					}
					last = e.ID
					got = append(got, e.EventID)
					return nil
				})
				if err != nil {
					t.Fatalf("Each: %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Each = %v, want %v", got, tt.want)
				}
			})
		}
	})
}

func TestEachStopsOnError(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		stop := errors.New("stop")
		n := 0
		err := s.Each(context.Background(), Filter{}, func(*Entry) error {
			n++
			if n == 2 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 2 {
			t.Errorf("Each = %v after %d calls, want stop after 2", err, n)
		}
		// The store is still usable (the rows were closed).
		if _, err := s.CountBy(context.Background(), "state", Filter{}); err != nil {
			t.Errorf("store unusable after a stopped Each: %v", err)
		}
	})
}

func TestCountBy(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		fpX := evidence.Fingerprint(`invalid character 'x' at offset 12`)
		tests := []struct {
			column string
			f      Filter
			want   map[string]int64
		}{
			{"reason", Filter{}, map[string]int64{"permanent": 5, "retries_exhausted": 1, "delivery_limit": 1}},
			{"state", Filter{}, map[string]int64{"pending": 2, "parked": 1, "redriven": 1, "discarded": 1, "needs_manual": 1, "erased": 1}},
			{"error_type", Filter{Queue: "orders.created"}, map[string]int64{"*json.SyntaxError": 4, "*lily.TimeoutError": 1}},
			{"consumer_version", Filter{Queue: "payments"}, map[string]int64{"v1.2.3": 1, "v9": 1}},
			{"source", Filter{States: []State{StatePending}}, map[string]int64{"sqlite/orders.created": 2}},
			{"fingerprint", Filter{Reason: "permanent", States: []State{StatePending, StateParked, StateDiscarded}}, map[string]int64{fpX: 3}},
			{"reason", Filter{Queue: "nope"}, map[string]int64{}},
		}
		for _, tt := range tests {
			t.Run(tt.column, func(t *testing.T) {
				got, err := s.CountBy(ctx, tt.column, tt.f)
				if err != nil {
					t.Fatalf("CountBy(%s): %v", tt.column, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("CountBy(%s, %+v) = %v, want %v", tt.column, tt.f, got, tt.want)
				}
			})
		}
		for _, col := range []string{"body", "queue; DROP TABLE lily_dlq_entries", "", "REASON"} {
			if _, err := s.CountBy(ctx, col, Filter{}); err == nil {
				t.Errorf("CountBy(%q) accepted", col)
			} else if !strings.Contains(err.Error(), "reason, error_type") {
				t.Errorf("CountBy(%q) error does not list the valid columns: %v", col, err)
			}
		}
		if n, err := s.CountBy(ctx, "reason", Filter{}); err != nil || n["permanent"] != 5 {
			t.Errorf("table damaged after a rejected column: %v, %v", n, err)
		}
	})
}

func TestNewSharesHandle(t *testing.T) {
	ctx := context.Background()
	func(t *testing.T, s *Store) {
		s2, err := New(ctx, s.DB())
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		// Close of a Store made by New leaves the handle open.
		if err := s.DB().PingContext(ctx); err != nil {
			t.Errorf("New's Close closed the shared handle: %v", err)
		}
		// Migrate is idempotent.
		if err := catalogdb.Migrate(ctx, s.DB()); err != nil {
			t.Errorf("second Migrate: %v", err)
		}
	}(t, openStore(t))
}

// eachStore runs fn as a subtest on every catalog store: a SQLite file and
// a PostgreSQL schema of its own (skipped loudly without a server, failed
// under CI=true). This is the catalog's shared test suite: every test
// that goes through the Store API runs on both.
func eachStore(t *testing.T, fn func(t *testing.T, s *Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, openStore(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s, err := OpenPostgres(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatalf("OpenPostgres: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

// TestDuplicateIsTheSameDeadLettering (issue 12 item 1): two dead letters
// are merged only when event ID, body, source and coordinates agree — a
// shared event ID alone keeps both.
func TestDuplicateIsTheSameDeadLettering(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		dl := func(id, body string, at time.Time, partition int32, offset int64) *transport.Delivery {
			h := transport.Headers{}
			evidence.Record{Reason: evidence.ReasonPermanent, Source: "kafka/t", DeadLetteredAt: at,
				SourcePartition: partition, HasPartition: true, SourceOffset: offset, HasOffset: true}.Apply(h)
			return &transport.Delivery{Queue: "t", Message: transport.Message{EventID: id, Body: []byte(body), Headers: h}}
		}
		ingest := func(ds ...*transport.Delivery) {
			t.Helper()
			es := make([]*Entry, len(ds))
			for i, d := range ds {
				es[i] = EntryFromDeadLetter("t", d, testNow)
			}
			if err := s.Insert(ctx, es...); err != nil {
				t.Fatal(err)
			}
		}
		first := dl("e", "body-1", testNow, 0, 5)
		ingest(first,
			dl("e", "body-2", testNow, 0, 6),                  // same ID, other body: another message
			dl("e", "body-1", testNow, 1, 5),                  // same ID and body, other partition
			dl("e", "body-1", testNow.Add(time.Minute), 0, 5), // the same message dead-lettered again (ack lost)
		)
		ingest(first) // ingested again: nothing added, not a duplicate either
		var entries []*Entry
		if err := s.Each(ctx, Filter{Queue: "t"}, func(e *Entry) error { entries = append(entries, e); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(entries) != 3 {
			t.Fatalf("%d entries, want 3 (body-1@p0/o5, body-2, body-1@p1/o5)", len(entries))
		}
		var dups int
		if err := s.DB().QueryRowContext(ctx, `SELECT SUM(duplicates) FROM lily_dlq_entries`).Scan(&dups); err != nil {
			t.Fatal(err)
		}
		if dups != 1 || entries[0].SourceCoords != "p0/o5" {
			t.Errorf("duplicates %d (want 1: the second dead-lettering of body-1@p0/o5), coords %q", dups, entries[0].SourceCoords)
		}
	})
}

// addCounts adds to a queue's ledger counters, as a transport does (the
// ledger's own API is package ledger's).
func addCounts(t *testing.T, s *Store, queue string, accepted, acked int64) {
	t.Helper()
	ctx := context.Background()
	if err := s.db.WithTx(ctx, func(tx *catalogdb.Tx) error { return catalogdb.AddCounts(ctx, tx, queue, accepted, acked) }); err != nil {
		t.Fatalf("AddCounts: %v", err)
	}
}

func delivery(queue, id, body string) *transport.Delivery {
	return &transport.Delivery{Queue: queue, Message: transport.Message{EventID: id, Body: []byte(body)}, DeliveryCount: 1}
}
