package lily_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// A handler whose process crashed (lily.Crashed) is not retried through a
// bucket: the delivery is released, the transport counts it, and past
// delivery_limit it is dead-lettered with reason delivery_limit without
// another handler call; a healthy neighbour is acked; the ledger balances.
func TestCrashedReleasesUntilDeliveryLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	q := lily.QueueConfig{Name: "crash.q", RetryAttempts: 3, RetryBackoffMillis: new(int64(10)), DeliveryLimit: new(3)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, q.Name, []lily.Message{{EventID: "poison", Body: []byte("x")}, {EventID: "ok", Body: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	var calls, retried atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var settled atomic.Int64
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		switch e.Kind {
		case lily.EventRetried:
			retried.Add(1)
		case lily.EventAcked, lily.EventDeadLettered:
			if settled.Add(1) == 2 {
				stop()
			}
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if d.EventID == "poison" {
			calls.Add(1)
			return lily.Crashed(errors.New("exit: signal: killed"))
		}
		return nil
	}), lily.ConsumerOptions{Queue: q, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || retried.Load() != 0 {
		t.Fatalf("handler calls for the crashing message = %d, retries = %d; want 3 calls (delivery_limit) and no retry", calls.Load(), retried.Load())
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	byReason, err := cat.CountBy(ctx, "reason", catalog.Filter{Queue: q.Name})
	if err != nil {
		t.Fatal(err)
	}
	if byReason[string(evidence.ReasonDeliveryLimit)] != 1 || len(byReason) != 1 {
		t.Fatalf("dead letters by reason = %v, want delivery_limit: 1", byReason)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Accepted != 2 || rows[0].Acked != 1 || rows[0].DeadLettered != 1 || rows[0].Lost != 0 || rows[0].InFlight != 0 {
		t.Fatalf("ledger = %+v, want 2 accepted = 1 acked + 1 dead-lettered", rows)
	}
}
