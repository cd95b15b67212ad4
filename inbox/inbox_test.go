package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/internal/waittest"
)

func delivery(queue, id string) *lily.Delivery {
	return &lily.Delivery{Message: lily.Message{EventID: id, Body: []byte(`{}`)}, Queue: queue, DeliveryCount: 1}
}

// deliverIn runs Apply with an effect that adds a row, in tx.
func deliverIn(t *testing.T, b backend, ib inbox.Inbox, tx any, d *lily.Delivery) bool {
	t.Helper()
	ctx := context.Background()
	applied, err := ib.Apply(ctx, tx, d, func() error {
		return exec(ctx, tx, `INSERT INTO effects (event_id, amount) VALUES ($1, $2)`, d.EventID, 100)
	})
	if err != nil {
		t.Fatalf("%s: Apply %s: %v", b.name, d.EventID, err)
	}
	return applied
}

// deliver runs one handler transaction: Apply with an effect that adds a
// row, then commit.
func deliver(t *testing.T, b backend, ib inbox.Inbox, d *lily.Delivery) bool {
	t.Helper()
	ctx := context.Background()
	tx, commit, rollback := b.begin(t, ctx)
	defer rollback()
	applied := deliverIn(t, b, ib, tx, d)
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	return applied
}

// TestOnceAppliesOncePerConsumer: the same event delivered three times is
// applied once; the two duplicates are acked (nil) and recorded; a second
// consumer of the same event applies it once too.
func TestOnceAppliesOncePerConsumer(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		rec := &effecttest.Recorder{}
		ib := inbox.Inbox{Hooks: []lily.Hook{rec}}
		d := delivery("orders.created", lily.NewEventID())
		var got []bool
		for range 3 {
			got = append(got, deliver(t, b, ib, d))
		}
		if got[0] != true || got[1] || got[2] {
			t.Fatalf("applied = %v, want [true false false]", got)
		}
		other := inbox.Inbox{Consumer: "billing", Hooks: []lily.Hook{rec}}
		if !deliver(t, b, other, d) || deliver(t, b, other, d) {
			t.Fatal("consumer billing: want applied once")
		}
		if n := b.count(t, `SELECT COUNT(*) FROM effects WHERE event_id = $1`, d.EventID); n != 2 {
			t.Fatalf("effects = %d, want 2 (one per consumer)", n)
		}
		if n := rec.Kinds(lily.EventDuplicate); n != 3 {
			t.Fatalf("duplicate events = %d, want 3", n)
		}
		for _, c := range []string{"orders.created", "billing"} {
			ok, err := inbox.Applied(context.Background(), b.db, c, d.EventID)
			if err != nil || !ok {
				t.Fatalf("Applied(%s) = %v, %v", c, ok, err)
			}
		}
	})
}

// TestOnceFailedEffectLeavesNoMark: an effect that fails leaves no mark,
// even if the caller commits anyway; the next delivery applies it.
func TestOnceFailedEffectLeavesNoMark(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		d := delivery("orders.created", lily.NewEventID())
		boom := errors.New("payment gateway: timeout")
		tx, commit, _ := b.begin(t, ctx)
		err := inbox.Once(ctx, tx, d, func() error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Once = %v, want the effect's error", err)
		}
		if err := commit(); err != nil { // a careless caller
			t.Fatal(err)
		}
		if !deliver(t, b, inbox.Inbox{}, d) {
			t.Fatal("the retry after a failed effect was not applied")
		}
		if n := b.count(t, `SELECT COUNT(*) FROM effects`); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
	})
}

// TestOnceRefusesBadInput: no event ID, a nil or foreign transaction.
func TestOnceRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	ran := false
	effect := func() error { ran = true; return nil }
	if err := inbox.Once(ctx, nil, delivery("q", "e1"), effect); err == nil {
		t.Error("nil tx accepted")
	}
	if err := inbox.Once(ctx, 42, delivery("q", "e1"), effect); err == nil {
		t.Error("an int accepted as a transaction")
	}
	if err := inbox.Once(ctx, struct{}{}, delivery("q", ""), effect); err == nil {
		t.Error("a delivery without event ID accepted")
	}
	if ran {
		t.Error("the effect ran on bad input")
	}
}

// TestOnceConcurrentDuplicates: several transactions deliver the same
// event at once (competing consumers after a redelivery); exactly one
// applies it, the others wait for it and find the mark.
func TestOnceConcurrentDuplicates(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		const copies = 6
		for round := range 5 {
			d := delivery("orders.created", lily.NewEventID())
			var applied atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range copies {
				wg.Go(func() {
					<-start
					if deliver(t, b, inbox.Inbox{}, d) {
						applied.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if applied.Load() != 1 {
				t.Fatalf("round %d: %d transactions applied the event, want 1", round, applied.Load())
			}
			if n := b.count(t, `SELECT COUNT(*) FROM effects WHERE event_id = $1`, d.EventID); n != 1 {
				t.Fatalf("round %d: effects = %d, want 1", round, n)
			}
		}
	})
}

// TestOnceSecondWaitsForFirst: on PostgreSQL the second transaction's
// mark waits while the first is open; if the first rolls back, the second
// applies the effect; if it commits, the second finds a duplicate.
func TestOnceSecondWaitsForFirst(t *testing.T) {
	// SQLite has one writer: a second transaction cannot write before the
	// first ends (TestOnceConcurrentDuplicates covers it there).
	eachPG(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, firstCommits := range []bool{false, true} {
			d := delivery("orders.created", lily.NewEventID())
			tx1, commit1, rollback1 := b.begin(t, ctx)
			if !mustApply(t, ctx, tx1, d) {
				t.Fatal("first transaction: not applied")
			}
			second := make(chan bool, 1)
			pid := make(chan int64, 1)
			go func() {
				tx2, commit2, rollback2 := b.begin(t, ctx)
				defer rollback2()
				pid <- queryInt(t, ctx, tx2, `SELECT pg_backend_pid()`)
				ok := mustApply(t, ctx, tx2, d)
				if err := commit2(); err != nil {
					t.Error(err)
				}
				second <- ok
			}()
			// The second transaction's mark is blocked by the first: the
			// server says so (pg_blocking_pids), and it has not returned.
			p := <-pid
			waittest.ForState(t, "the second transaction blocked by the first", func() (bool, string) {
				blockers := b.count(t, `SELECT cardinality(pg_blocking_pids($1::int))`, p)
				return blockers > 0, fmt.Sprintf("backend %d blocked by %d", p, blockers)
			})
			select {
			case <-second:
				t.Fatal("the second transaction did not wait for the first")
			default:
			}
			if firstCommits {
				if err := commit1(); err != nil {
					t.Fatal(err)
				}
			} else {
				rollback1()
			}
			if got := <-second; got == firstCommits {
				t.Fatalf("first commits=%v: second applied=%v", firstCommits, got)
			}
			if n := b.count(t, `SELECT COUNT(*) FROM effects WHERE event_id = $1`, d.EventID); n != 1 {
				t.Fatalf("effects = %d, want 1", n)
			}
		}
	})
}

func mustApply(t *testing.T, ctx context.Context, tx any, d *lily.Delivery) bool {
	ok, err := inbox.Apply(ctx, tx, d, func() error {
		return exec(ctx, tx, `INSERT INTO effects (event_id, amount) VALUES ($1, 1)`, d.EventID)
	})
	if err != nil {
		t.Error(err)
	}
	return ok
}

// TestPrune: marks older than the horizon go, newer ones stay.
func TestPrune(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range 30 {
			at := base.Add(time.Duration(i) * time.Hour)
			deliver(t, b, inbox.Inbox{Now: func() time.Time { return at }}, delivery("q", lily.NewEventID()))
		}
		n, err := inbox.Prune(ctx, b.db, base.Add(10*time.Hour))
		if err != nil || n != 10 {
			t.Fatalf("Prune = %d, %v; want 10", n, err)
		}
		if left := b.count(t, `SELECT COUNT(*) FROM lily_inbox`); left != 20 {
			t.Fatalf("%d marks left, want 20", left)
		}
		qc := lily.QueueConfig{Name: "q"}.WithDefaults()
		if h := inbox.Horizon(qc); h < time.Duration(qc.Settings().DLQRetentionHours)*time.Hour {
			t.Fatalf("Horizon %s is shorter than the DLQ retention", h)
		}
	})
}
