package transport

import (
	"context"
	"errors"
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
	next := func(_ context.Context, n int) ([]*Delivery, error) {
		n = min(n, len(queue))
		ds := queue[:n]
		queue = queue[n:]
		return ds, nil
	}
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
