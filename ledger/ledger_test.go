package ledger

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
)

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

func addCounts(t *testing.T, s *catalog.Store, queue string, accepted, acked int64) {
	t.Helper()
	if err := New(s).AddCounts(context.Background(), queue, accepted, acked); err != nil {
		t.Fatalf("AddCounts: %v", err)
	}
}

func TestLedger(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
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
		rows, err := l.Rows(ctx, c)
		if err != nil {
			t.Fatalf("Ledger: %v", err)
		}
		want := []Row{
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
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		// Entries of a queue the ledger never counted (e.g. ingested): they
		// are more than were accepted, so Lost is negative.
		if err := s.Insert(ctx, entry("ingested", "i1", evidence.ReasonExpired, catalog.StatePending, "x"),
			entry("ingested", "i2", evidence.ReasonExpired, catalog.StateDiscarded, "x")); err != nil {
			t.Fatal(err)
		}
		addCounts(t, s, "q", 3, 1)
		rows, err := l.Rows(ctx, nil)
		if err != nil {
			t.Fatalf("Ledger: %v", err)
		}
		want := []Row{
			{Queue: "ingested", DeadLettered: 1, Discarded: 1, Lost: -2},
			{Queue: "q", Accepted: 3, Acked: 1, Lost: 2},
		}
		if !reflect.DeepEqual(rows, want) {
			t.Errorf("Ledger:\n got %+v\nwant %+v", rows, want)
		}
	})
}

func TestLedgerInFlightError(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		addCounts(t, s, "q", 1, 0)
		boom := errors.New("broker unreachable")
		if _, err := l.Rows(context.Background(), &inflight{err: boom}); !errors.Is(err, boom) {
			t.Errorf("Ledger = %v, want the counter's error", err)
		}
	})
}

// TestLedgerAfterDiscard: entries discarded with a record leave
// dead_lettered for discarded (the discard of catalog's TestDiscard).
func TestLedgerAfterDiscard(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		seed(t, s)
		fixedNow := func() time.Time { return testNow.Add(time.Hour) }
		res, err := s.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{Reason: "permanent"}, Reason: "bad schema", Actor: "carol", Now: fixedNow})
		if err != nil || res.Count != 3 {
			t.Fatalf("Discard = %+v, %v", res, err)
		}
		rows, _ := l.Rows(ctx, nil)
		for _, r := range rows {
			if r.Queue == "payments" && (r.Discarded != 2 || r.DeadLettered != 0) {
				t.Errorf("ledger after discard %+v", r)
			}
		}
	})
}

// TestUnacked: the event IDs counted accepted and not acked, without their
// body digests, sorted; another queue's and acked ones are left out.
func TestUnacked(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		key := func(id string) string { return Key(id, []byte("body of "+id)) }
		if err := l.count(ctx, "q", "accepted", []string{key("c"), key("a"), key("b")}); err != nil {
			t.Fatal(err)
		}
		if err := l.count(ctx, "other", "accepted", []string{key("x")}); err != nil {
			t.Fatal(err)
		}
		if err := l.count(ctx, "q", "acked", []string{key("b")}); err != nil {
			t.Fatal(err)
		}
		got, err := l.Unacked(ctx, "q")
		if err != nil || !reflect.DeepEqual(got, []string{"a", "c"}) {
			t.Fatalf("Unacked(q) = %v, %v; want [a c]", got, err)
		}
	})
}

// ackingCounter is a transport whose consumer acks the messages it holds
// while the ledger asks what it holds: the first InFlight call settles them
// (the catalog counts them acked) and answers after the settlement.
type ackingCounter struct {
	t     *testing.T
	s     *catalog.Store
	held  int64
	asked int
}

func (c *ackingCounter) InFlight(ctx context.Context, q string) (int64, error) {
	c.asked++
	if c.held > 0 {
		addCounts(c.t, c.s, q, 0, c.held)
		c.held = 0
	}
	return c.held, nil
}

// TestLedgerReadWhileConsumersAck: a message acked between the ledger's
// read of the catalog and its read of the transport is counted once, not
// shown lost (before, Rows read the counters, then the transport: 5 lost
// in httpapi's TestRedriveJobOutlivesTheServer, once in 40 runs under load).
func TestLedgerReadWhileConsumersAck(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		addCounts(t, s, "orders", 10, 5) // 5 acked, 5 held by a consumer
		c := &ackingCounter{t: t, s: s, held: 5}
		rows, err := New(s).Rows(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		want := []Row{{Queue: "orders", Accepted: 10, Acked: 10}}
		if !reflect.DeepEqual(rows, want) {
			t.Errorf("Rows while the consumer acks:\n got %+v\nwant %+v", rows, want)
		}
		if c.asked != 2 {
			t.Errorf("the transport was asked %d times, want 2 (once more after the counts moved)", c.asked)
		}
	})
}
