package ledger

import (
	"context"
	"sync"
	"time"

	"github.com/lily-mq/lily/transport"
)

// leaseKeeper extends the leases of a received batch for as long as this
// Accounted has it and no handler does: while the batch is counted, and
// while it is held through a catalog outage (see Receive). On a
// lease-based transport (NATS JetStream, SQS, Azure Storage queues,
// Pub/Sub) a lease runs from the moment the broker handed the message
// out; a count slower than the lease, or an outage longer than it, would
// otherwise let the broker hand the same message to another reader, its
// count raised, while this one still holds it — the duplicate and the
// raised count that holding exists to avoid. The consumer's own lease
// extension takes over once the batch is handed out.
type leaseKeeper struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	running sync.WaitGroup // an extension in flight
	cancel  context.CancelFunc
}

// keepLeases starts a keeper for hb, received by consumer from queue, when
// the wrapped transport leases its deliveries and can extend them; else it
// returns nil (a nil keeper's end is a no-op). It extends every fifth of
// the lease. A batch handed out within a fifth of the lease — the common
// case — costs one timer, stopped unfired: this runs for every batch.
func (a *Accounted) keepLeases(queue, consumer string, hb *heldBatch) *leaseKeeper {
	ext, ok := a.Transport.(transport.LeaseExtender)
	if !ok {
		return nil
	}
	ft := transport.FeaturesOf(a.Transport, queue)
	if !ft.Leases || ft.VisibilityTimeout <= 0 {
		return nil
	}
	lease := ft.VisibilityTimeout
	ctx, cancel := context.WithCancel(context.Background())
	k := &leaseKeeper{cancel: cancel}
	extend := func() {
		k.mu.Lock()
		if k.stopped {
			k.mu.Unlock()
			return
		}
		k.running.Add(1)
		k.mu.Unlock()
		defer k.running.Done()
		if ds := hb.deliveries(); len(ds) > 0 {
			if err := ext.ExtendLeases(ctx, &transport.ExtendParams{Consumer: consumer, Deliveries: ds, For: lease}); err != nil && ctx.Err() == nil {
				a.o.Log.Warn("extending the leases of deliveries not yet handed out failed; the broker may hand them out again when their lease runs out",
					"queue", queue, "consumer", consumer, "count", len(ds), "err", err)
			}
		}
		k.mu.Lock()
		if !k.stopped {
			k.timer.Reset(lease / 5)
		}
		k.mu.Unlock()
	}
	k.mu.Lock() // an early firing waits for the timer to be set
	k.timer = time.AfterFunc(lease/5, extend)
	k.mu.Unlock()
	return k
}

// end stops the keeper and waits for an extension in flight (cancelled):
// no extension is sent after end returns.
func (k *leaseKeeper) end() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	k.mu.Unlock()
	k.cancel()
	k.running.Wait()
}

// ended reports whether end was called.
func (k *leaseKeeper) ended() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stopped
}
