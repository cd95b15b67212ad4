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

// inflight is an InFlightCounter stub.
type inflight struct {
	n     map[string]int64
	err   error
	asked []string
}

func (c *inflight) InFlight(_ context.Context, q string) (int64, error) {
	c.asked = append(c.asked, q)
	return c.n[q], c.err
}

func addCounts(t *testing.T, s *Store, queue string, accepted, acked int64) {
	t.Helper()
	if err := s.AddCounts(context.Background(), queue, accepted, acked); err != nil {
		t.Fatalf("AddCounts: %v", err)
	}
}

func TestLedger(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		// orders.created: entries pending 2, redriven 1, discarded 1, erased 1.
		addCounts(t, s, "orders.created", 10, 0)
		addCounts(t, s, "orders.created", 5, 4)
		addCounts(t, s, "orders.created", 0, 3)
		// payments: entries parked 1, needs_manual 1.
		addCounts(t, s, "payments", 9, 5)
		// declared, nothing happened.
		addCounts(t, s, "idle", 0, 0)

		c := &inflight{n: map[string]int64{"orders.created": 4, "payments": 1}}
		rows, err := s.Ledger(ctx, c)
		if err != nil {
			t.Fatalf("Ledger: %v", err)
		}
		want := []LedgerRow{
			{Queue: "idle"},
			// 15 accepted = 7 acked + 2 dead-lettered + 2 discarded + 4 in flight.
			{Queue: "orders.created", Accepted: 15, Acked: 7, DeadLettered: 2, Discarded: 2, InFlight: 4, Lost: 0},
			// 9 accepted, 5 acked, 2 dead-lettered (parked, needs_manual), 1 in flight: 1 lost.
			{Queue: "payments", Accepted: 9, Acked: 5, DeadLettered: 2, Discarded: 0, InFlight: 1, Lost: 1},
		}
		if !reflect.DeepEqual(rows, want) {
			t.Errorf("Ledger:\n got %+v\nwant %+v", rows, want)
		}
		if !rows[1].Balanced() || rows[2].Balanced() {
			t.Errorf("Balanced: orders %v, payments %v", rows[1].Balanced(), rows[2].Balanced())
		}
		if len(c.asked) != 3 {
			t.Errorf("InFlight asked for %v, want every queue", c.asked)
		}
	})
}

func TestLedgerWithoutCounterAndInvented(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		// Entries of a queue the ledger never counted (e.g. ingested): they
		// are more than were accepted, so Lost is negative.
		if err := s.Insert(ctx, entry("ingested", "i1", evidence.ReasonExpired, StatePending, "x"),
			entry("ingested", "i2", evidence.ReasonExpired, StateDiscarded, "x")); err != nil {
			t.Fatal(err)
		}
		addCounts(t, s, "q", 3, 1)
		rows, err := s.Ledger(ctx, nil)
		if err != nil {
			t.Fatalf("Ledger: %v", err)
		}
		want := []LedgerRow{
			{Queue: "ingested", DeadLettered: 1, Discarded: 1, Lost: -2},
			{Queue: "q", Accepted: 3, Acked: 1, Lost: 2},
		}
		if !reflect.DeepEqual(rows, want) {
			t.Errorf("Ledger:\n got %+v\nwant %+v", rows, want)
		}
	})
}

func TestLedgerInFlightError(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		addCounts(t, s, "q", 1, 0)
		boom := errors.New("broker unreachable")
		if _, err := s.Ledger(context.Background(), &inflight{err: boom}); !errors.Is(err, boom) {
			t.Errorf("Ledger = %v, want the counter's error", err)
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
