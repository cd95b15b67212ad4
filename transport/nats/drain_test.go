package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestDrainInBatches: a drain removes a batch only after its store
// returned nil, and only that batch: a failed store leaves it and
// everything behind it; a limited drain removes what it stored; the last
// drain empties the stream. Every dead letter is stored exactly once.
func TestDrainInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := open(t)
	qc := lily.QueueConfig{Name: fmt.Sprintf("drain.%08x", rand.Uint32()), Transport: "nats", Breaker: new(bool)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
	pub := make([]lily.Message, 5)
	for i := range pub {
		pub[i] = lily.Message{Body: fmt.Appendf(nil, "bad order %d", i)}
	}
	if err := lily.Publish(ctx, tr, qc.Name, pub); err != nil {
		t.Fatal(err)
	}
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		return lily.Permanent(errors.New("bad order"))
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 100 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	transporttest.WaitForState(t, "five dead letters", func() (bool, string) {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && n == 5, fmt.Sprintf("%d dead letters (%v)", n, err)
	})
	stop()

	var stored []string
	calls := 0
	keep := func(_ context.Context, ds []*transport.Delivery) error {
		if calls++; calls == 2 {
			return errors.New("catalog is down")
		}
		for _, d := range ds {
			stored = append(stored, d.EventID)
		}
		return nil
	}
	depth := func(want int64) {
		t.Helper()
		if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != want {
			t.Fatalf("dead letters left %d (%v), want %d", n, err, want)
		}
	}
	n, err := tr.DrainDeadLetters(ctx, &transport.DrainParams{Queue: qc.Name, Batch: 2}, keep)
	if n != 2 || err == nil {
		t.Fatalf("drain with the second store failing: %d, %v; want 2 and the store's error", n, err)
	}
	depth(3)
	if n, err := tr.DrainDeadLetters(ctx, &transport.DrainParams{Queue: qc.Name, Batch: 2, Limit: 2}, keep); n != 2 || err != nil {
		t.Fatalf("drain of 2: %d, %v", n, err)
	}
	depth(1)
	if n, err := tr.DrainDeadLetters(ctx, &transport.DrainParams{Queue: qc.Name}, keep); n != 1 || err != nil {
		t.Fatalf("drain of the rest: %d, %v", n, err)
	}
	depth(0)
	var want []string
	for _, m := range pub {
		want = append(want, m.EventID)
	}
	slices.Sort(stored)
	slices.Sort(want)
	if !slices.Equal(stored, want) {
		t.Errorf("stored %v, want each of %v once", stored, want)
	}
	// The server applies an acknowledgement after reading it: wait for it.
	transporttest.WaitForState(t, "nothing in flight", func() (bool, string) {
		n, err := tr.InFlight(ctx, qc.Name)
		return err == nil && n == 0, fmt.Sprintf("in flight %d (%v)", n, err)
	})
}
