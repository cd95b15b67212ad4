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
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// parallelSettler declares that its Settle calls progress in parallel
// (transport.ConcurrentSettler) and records how many overlap.
type parallelSettler struct {
	transport.Transport
	par            int
	cur, max, msgs atomic.Int64
}

func (p *parallelSettler) SettleConcurrency() int { return p.par }

// Features are the SQLite store's (parked messages land in its catalog).
func (p *parallelSettler) Features() transport.Features {
	return p.Transport.(transport.Featurer).Features()
}

// ExtendLeases forwards to the SQLite store (transport.LeaseExtender).
func (p *parallelSettler) ExtendLeases(ctx context.Context, ep *transport.ExtendParams) error {
	return p.Transport.(transport.LeaseExtender).ExtendLeases(ctx, ep)
}

func (p *parallelSettler) Settle(ctx context.Context, sp *transport.SettleParams) error {
	n := p.cur.Add(1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
	defer p.cur.Add(-1)
	p.msgs.Add(int64(len(sp.Settlements)))
	return p.Transport.Settle(ctx, sp)
}

// TestConcurrentSettlement runs a consumer over a transport that settles
// batches in parallel: every message is acked or dead-lettered exactly once
// as its kind demands, nothing stays in flight, and no more batches overlap
// than the transport allows — none at all when the queue's ordering is not
// "reorder".
func TestConcurrentSettlement(t *testing.T) {
	for _, ordering := range []string{lily.OrderingReorder, lily.OrderingBlock} {
		t.Run(ordering, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "par.db"), sqlite.Options{PollInterval: 2 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer sq.Close()
			tr := &parallelSettler{Transport: sq, par: 3}
			cat, err := catalog.New(ctx, sq.DB())
			if err != nil {
				t.Fatal(err)
			}
			keys := redrive.NewKeys(cat)
			qc := lily.QueueConfig{Name: "par.orders", Ordering: ordering}.WithDefaults()
			if err := sq.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
				t.Fatal(err)
			}
			const n = 600
			msgs := make([]lily.Message, n)
			for i := range msgs {
				msgs[i].Body = []byte(fmt.Sprint(i))
			}
			if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			seen := map[string]lily.EventKind{}
			var done atomic.Int64
			finished := make(chan struct{})
			hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
				if e.Kind != lily.EventAcked && e.Kind != lily.EventDeadLettered {
					return
				}
				mu.Lock()
				if k, dup := seen[e.EventID]; dup {
					t.Errorf("%s settled twice (%s, then %s)", e.EventID, k, e.Kind)
				}
				seen[e.EventID] = e.Kind
				mu.Unlock()
				if done.Add(1) == n {
					close(finished)
				}
			})
			c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
				if d.Body[len(d.Body)-1] == '7' {
					return lily.Permanent(errors.New("sevens are poison"))
				}
				return nil
			}), lily.ConsumerOptions{Queue: qc, Prefetch: 64, SettleBatch: 16, ReceiveWait: 10 * time.Millisecond, Keys: keys,
				Hooks: []lily.Hook{hook}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-finished:
				case <-time.After(60 * time.Second):
				}
				cancel()
			}()
			if err := c.Run(runCtx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i, m := range msgs {
				want := lily.EventAcked
				if i%10 == 7 {
					want = lily.EventDeadLettered
				}
				if seen[m.EventID] != want {
					t.Errorf("message %d: %q, want %q", i, seen[m.EventID], want)
				}
			}
			if got := tr.msgs.Load(); got != n {
				t.Errorf("%d settlements reached the transport, want %d", got, n)
			}
			if in, err := sq.InFlight(ctx, qc.Name); err != nil || in != 0 {
				t.Errorf("%d in flight (%v)", in, err)
			}
			limit := int64(3)
			if ordering != lily.OrderingReorder {
				limit = 1
			}
			if m := tr.max.Load(); m > limit {
				t.Errorf("%d Settle calls overlapped, want at most %d", m, limit)
			}
			t.Logf("at most %d Settle calls overlapped", tr.max.Load())
		})
	}
}
