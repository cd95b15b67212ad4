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
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// keepLeases starts a keeper for hb, received by consumer from queue, when
// the wrapped transport leases its deliveries and can extend them; else it
// returns nil (a nil keeper's end is a no-op). It extends every fifth of
// the lease.
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
	k := &leaseKeeper{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-k.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		t := time.NewTicker(lease / 5)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
			}
			ds := hb.deliveries()
			if len(ds) == 0 {
				continue
			}
			if err := ext.ExtendLeases(ctx, &transport.ExtendParams{Consumer: consumer, Deliveries: ds, For: lease}); err != nil && ctx.Err() == nil {
				a.o.Log.Warn("extending the leases of deliveries not yet handed out failed; the broker may hand them out again when their lease runs out",
					"queue", queue, "consumer", consumer, "count", len(ds), "err", err)
			}
		}
	}()
	return k
}

// end stops the keeper and waits until it has: no extension is sent
// after end returns.
func (k *leaseKeeper) end() {
	if k == nil {
		return
	}
	k.once.Do(func() { close(k.stop) })
	<-k.done
}
