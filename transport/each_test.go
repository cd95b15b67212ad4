package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDrainBatches: batches go to store and only then to ack; a batch that
// store refuses is not acked; the limit stops the drain; RunEach and
// SettleErrorOf keep errors aligned.
func TestDrainBatches(t *testing.T) {
	ctx := context.Background()
	queue := make([]*Delivery, 7)
	for i := range queue {
		queue[i] = &Delivery{MessageID: string(rune('a' + i))}
	}
	var stored, acked []string
	next := takeFrom(&queue)
	store := func(_ context.Context, ds []*Delivery) error {
		for _, d := range ds {
			stored = append(stored, d.MessageID)
		}
		return nil
	}
	ack := func(_ context.Context, ds []*Delivery) error {
		if len(stored) < len(acked)+len(ds) {
			t.Fatal("acked before stored")
		}
		for _, d := range ds {
			acked = append(acked, d.MessageID)
		}
		return nil
	}
	n, err := DrainBatches(ctx, &DrainParams{Batch: 3, Limit: 5}, next, store, ack)
	if err != nil || n != 5 || len(acked) != 5 || len(queue) != 2 {
		t.Fatalf("drained %d (%v), acked %v, left %d; want 5 acked, 2 left", n, err, acked, len(queue))
	}
	refuse := errors.New("catalog down")
	n, err = DrainBatches(ctx, &DrainParams{}, next, func(context.Context, []*Delivery) error { return refuse }, ack)
	if !errors.Is(err, refuse) || n != 0 || len(acked) != 5 {
		t.Errorf("refused store: drained %d (%v), acked %v; want nothing acked", n, err, acked)
	}
	errs := RunEach(4, 2, func(i int) error {
		if i == 2 {
			return refuse
		}
		return nil
	})
	var se *SettleError
	if err := SettleErrorOf(errs); !errors.As(err, &se) || se.Err(2) != refuse || se.Err(1) != nil {
		t.Errorf("SettleErrorOf: %v", err)
	}
	if SettleErrorOf(make([]error, 3)) != nil {
		t.Error("SettleErrorOf of no errors is not nil")
	}
}

// TestDrainBatchesLostLease: a delivery whose lease ran out while its batch
// was stored is not counted as removed; it is back in the queue, read
// again, stored again and removed then — nothing lost, the count exact. A
// batch in which no lease survived ends the drain with an error that says
// what to change, instead of reading the same batch forever.
func TestDrainBatchesLostLease(t *testing.T) {
	ctx := context.Background()
	var queue []*Delivery
	for i := range 6 {
		queue = append(queue, &Delivery{MessageID: string(rune('a' + i))})
	}
	stored := map[string]int{}
	removed := map[string]int{}
	next := takeFrom(&queue)
	store := func(_ context.Context, ds []*Delivery) error {
		for _, d := range ds {
			stored[d.MessageID]++
		}
		return nil
	}
	lose := map[string]bool{"b": true, "e": true} // their leases run out once
	ack := func(_ context.Context, ds []*Delivery) error {
		errs := make([]error, len(ds))
		for i, d := range ds {
			if lose[d.MessageID] {
				delete(lose, d.MessageID)
				errs[i] = fmt.Errorf("delete %s: %w", d.MessageID, ErrLeaseLost)
				queue = append(queue, d) // visible again
				continue
			}
			removed[d.MessageID]++
		}
		return SettleErrorOf(errs)
	}
	n, err := DrainBatches(ctx, &DrainParams{Batch: 3}, next, store, ack)
	if err != nil || n != 6 || len(queue) != 0 {
		t.Fatalf("drained %d (%v), %d left; want 6 removed, none left", n, err, len(queue))
	}
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		if removed[id] != 1 {
			t.Errorf("%s removed %d times, want once", id, removed[id])
		}
	}
	if stored["b"] != 2 || stored["e"] != 2 || stored["a"] != 1 {
		t.Errorf("stored %v: want the two lost leases stored twice, the rest once", stored)
	}

	// Every lease of the batch lost: an error naming the fix, the batch
	// not counted.
	queue = []*Delivery{{MessageID: "x"}, {MessageID: "y"}}
	allLost := func(_ context.Context, ds []*Delivery) error {
		errs := make([]error, len(ds))
		for i := range ds {
			errs[i] = ErrLeaseLost
		}
		return SettleErrorOf(errs)
	}
	n, err = DrainBatches(ctx, &DrainParams{Batch: 2}, next, store, allLost)
	var se *SettleError
	if !errors.As(err, &se) || n != 0 || !strings.Contains(fmt.Sprint(err), "visibility timeout") {
		t.Errorf("every lease lost: drained %d, err %v; want 0 and an error naming the visibility timeout", n, err)
	}
}

// takeFrom is a drain's next over an in-memory queue: up to n from its
// head, removed.
func takeFrom(queue *[]*Delivery) func(context.Context, int) ([]*Delivery, error) {
	return func(_ context.Context, n int) ([]*Delivery, error) {
		n = min(n, len(*queue))
		ds := (*queue)[:n]
		*queue = (*queue)[n:]
		return ds, nil
	}
}
