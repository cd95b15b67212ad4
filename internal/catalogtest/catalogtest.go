// Package catalogtest holds what the tests of the packages layered on the
// catalog (ledger, redrive, rules) share: stores on both backends, entries
// with a consumer's evidence, a seeded catalog, a dead-letter drainer.
// Package catalog's own tests keep their copies: they are inside the
// package, which this one imports.
package catalogtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// Now is the tests' fixed time.
var Now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// OpenStore opens a SQLite catalog in a file of its own, closed when t
// ends.
func OpenStore(t testing.TB) *catalog.Store {
	t.Helper()
	s, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// EachStore runs fn as a subtest on every catalog store: a SQLite file and
// a PostgreSQL schema of its own (skipped loudly without a server, failed
// under CI=true). Every test that goes through the store runs on both.
func EachStore(t *testing.T, fn func(t *testing.T, s *catalog.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, OpenStore(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatalf("OpenPostgres: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

// EvidenceHeaders returns headers as a consumer writes them when it
// dead-letters: the original headers plus Lily's evidence.
func EvidenceHeaders(reason evidence.Reason, errType, errMsg, version string, delivery, retries, redrives int) transport.Headers {
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
		FirstFailureAt:  Now.Add(-time.Minute),
		LastFailureAt:   Now,
		DeadLetteredAt:  Now,
		Consumer:        "orders-worker",
		ConsumerVersion: version,
		Host:            "host-1",
	}.Apply(h)
	return h
}

// Entry returns the entry of message id (key "k-"+id, a JSON body naming
// it) dead-lettered from queue with reason and error message msg, in
// state.
func Entry(queue, id string, reason evidence.Reason, state catalog.State, msg string) *catalog.Entry {
	h := EvidenceHeaders(reason, "*json.SyntaxError", msg, "v1.2.3", 1, 0, 0)
	e := catalog.NewEntry(queue, transport.Message{EventID: id, Key: "k-" + id, Type: "order.created", Body: []byte(`{"id":"` + id + `"}`)},
		h, string(reason), Now)
	e.State = state
	return e
}

// Seed inserts seven entries in every state: orders.created holds e1, e2
// pending, e4 redriven, e5 discarded, e7 erased; payments e3 parked, e6
// needs_manual.
func Seed(t *testing.T, s *catalog.Store) []*catalog.Entry {
	t.Helper()
	es := []*catalog.Entry{
		Entry("orders.created", "e1", evidence.ReasonPermanent, catalog.StatePending, `invalid character 'x' at offset 12`),
		Entry("orders.created", "e2", evidence.ReasonRetriesExhausted, catalog.StatePending, "timeout after 30s"),
		Entry("payments", "e3", evidence.ReasonPermanent, catalog.StateParked, `invalid character 'y' at offset 99`),
		Entry("orders.created", "e4", evidence.ReasonDeliveryLimit, catalog.StateRedriven, "delivered 6 times"),
		Entry("orders.created", "e5", evidence.ReasonPermanent, catalog.StateDiscarded, `invalid character 'z' at offset 1`),
		Entry("payments", "e6", evidence.ReasonPermanent, catalog.StateNeedsManual, "x"),
		Entry("orders.created", "e7", evidence.ReasonPermanent, catalog.StateErased, "x"),
	}
	es[1].ErrorType = "*lily.TimeoutError"
	es[5].ConsumerVersion = "v9"
	if err := s.Insert(context.Background(), es...); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	return es
}

// Delivery returns a delivery of message id with body from queue.
func Delivery(queue, id, body string) *transport.Delivery {
	return &transport.Delivery{Queue: queue, Message: transport.Message{EventID: id, Body: []byte(body)}, DeliveryCount: 1}
}

// Drainer hands out its dead letters in batches and removes a batch only
// when store accepts it (a transport.DeadLetterDrainer).
type Drainer struct {
	Waiting []*transport.Delivery
	Batch   int
}

// DrainDeadLetters implements transport.DeadLetterDrainer.
func (f *Drainer) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	total := 0
	for len(f.Waiting) > 0 {
		n := min(f.Batch, len(f.Waiting))
		if err := store(ctx, f.Waiting[:n]); err != nil {
			return total, err
		}
		f.Waiting = f.Waiting[n:]
		total += n
	}
	return total, nil
}

// Entries counts queue's catalog entries and their distinct event IDs
// (an ingest that stored one twice shows entries > distinct).
func Entries(t testing.TB, cat *catalog.Store, queue string) (entries, distinct int) {
	t.Helper()
	ids := map[string]bool{}
	err := cat.Each(context.Background(), catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		entries++
		ids[e.EventID] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return entries, len(ids)
}

// LeaseHolder returns the holder of the lease named name ("" if none).
func LeaseHolder(t testing.TB, cat *catalog.Store, name string) string {
	t.Helper()
	ls, err := cat.Leases(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) == 0 {
		return ""
	}
	return ls[0].Holder
}

// HoldEntry locks, in a transaction of its own on store s, the row of the
// entry with eventID as a decision on it does (a redrive's claim, a
// discard, an edit): the row FOR UPDATE, in a keyed transaction. The
// transaction is rolled back when the test ends. On PostgreSQL only.
func HoldEntry(t testing.TB, s *catalog.Store, eventID string) {
	t.Helper()
	tx, err := catalogdb.Of(s).BeginKeyed(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	var id int64
	if err := tx.QueryRowContext(context.Background(), `SELECT id FROM lily_dlq_entries WHERE event_id = ? FOR UPDATE`, eventID).Scan(&id); err != nil {
		t.Fatalf("hold entry %s: %v", eventID, err)
	}
}

// PGFleet opens n stores on one PostgreSQL schema of its own, each with a
// connection pool of its own: n processes of a fleet sharing a catalog.
func PGFleet(t testing.TB, n int) []*catalog.Store {
	t.Helper()
	u := pgtest.URL(t)
	ss := make([]*catalog.Store, n)
	for i := range ss {
		s, err := catalog.OpenPostgres(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss[i] = s
	}
	return ss
}
