package lily_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// TestBreakerTurnsOutageIntoLag runs healthy messages against a dependency
// that is down for longer than the retry span. Without the breaker most
// messages in the outage are dead-lettered; with it, none: they wait (held
// in a bucket without spending retries) and are acked after the outage.
func TestBreakerTurnsOutageIntoLag(t *testing.T) {
	for _, withBreaker := range []bool{false, true} {
		t.Run(fmt.Sprintf("breaker=%v", withBreaker), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "outage.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			on := withBreaker
			// The breaker must open before the first messages of the outage
			// exhaust their retries: its reaction time (about the window ×
			// the failure ratio, at least breaker_min_requests failures)
			// must be shorter than the retry span (100 + 200 = 300ms).
			qc := lily.QueueConfig{Name: "outage.orders", RetryAttempts: 2, RetryBackoffMillis: new(int64(100)), MaxRetryBackoffMillis: new(int64(200)),
				Breaker: &on, BreakerMinRequests: new(3), BreakerWindowMillis: new(int64(150)), BreakerCooldownMillis: new(int64(100))}.WithDefaults()
			if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
				t.Fatal(err)
			}
			// 40 messages wait; the dependency is down from the first
			// handler call for one second, far longer than the retry span.
			const n = 40
			msgs := make([]lily.Message, n)
			for i := range msgs {
				msgs[i].Body = []byte(fmt.Sprint(i))
			}
			if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			// The outage lasts one second of wall time; without the breaker
			// it lasts, besides, until the first message was dead-lettered,
			// so that the control shows what the breaker prevents however
			// slowly a loaded machine runs the handlers.
			var timeUp, deadLettered, started atomic.Bool
			down := func() bool { return !timeUp.Load() || (!withBreaker && !deadLettered.Load()) }
			var mu sync.Mutex
			var states []lily.BreakerState
			held := atomic.Int64{}
			settled := atomic.Int64{}
			// The run ends once every message is settled.
			runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
				switch e.Kind {
				case lily.EventBreaker:
					mu.Lock()
					states = append(states, e.Breaker)
					mu.Unlock()
				case lily.EventHeld:
					held.Add(1)
				case lily.EventDeadLettered:
					deadLettered.Store(true)
					if settled.Add(1) == n {
						cancel()
					}
				case lily.EventAcked:
					if settled.Add(1) == n {
						cancel()
					}
				}
			})
			c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
				if !started.Swap(true) {
					time.AfterFunc(time.Second, func() { timeUp.Store(true) })
				}
				if down() {
					return errors.New("payment service unavailable")
				}
				return nil
			}), lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 16, ReceiveWait: 20 * time.Millisecond,
				Hooks: []lily.Hook{hook}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Run(runCtx); err != nil {
				t.Fatal(err)
			}
			cat, _ := catalog.New(ctx, tr.DB())
			rows, err := ledger.New(cat).Rows(ctx, tr)
			if err != nil || len(rows) != 1 {
				t.Fatalf("ledger %v %v", rows, err)
			}
			l := rows[0]
			if l.Lost != 0 || l.InFlight != 0 || l.Acked+l.DeadLettered != n {
				t.Fatalf("ledger %+v: every message must be acked or dead-lettered", l)
			}
			t.Logf("breaker=%v: acked %d dead-lettered %d held %d states %v", withBreaker, l.Acked, l.DeadLettered, held.Load(), states)
			if withBreaker {
				if l.DeadLettered != 0 {
					t.Errorf("with the breaker %d healthy messages were dead-lettered by the outage, want 0", l.DeadLettered)
				}
				if held.Load() == 0 || len(states) == 0 || states[0] != lily.BreakerOpen {
					t.Errorf("the breaker never opened (states %v, held %d)", states, held.Load())
				}
				if last := states[len(states)-1]; last != lily.BreakerClosed {
					t.Errorf("the breaker ended %s, want closed after the outage", last)
				}
			} else if l.DeadLettered == 0 {
				t.Error("without the breaker the outage dead-lettered nothing: the scenario does not test anything")
			}
		})
	}
}
