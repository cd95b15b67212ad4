package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/transport"
)

// ErrCatalogUnavailable is wrapped by the error Accounted.Receive returns
// while it holds a batch it could not count.
var ErrCatalogUnavailable = errors.New("catalog unavailable")

// Receive receives through the wrapped transport and counts every delivery
// as accepted the first time its message is seen (once per Key), in
// one catalog transaction per batch, before any delivery is handed out:
// so a queue fed by producers other than lily.Publish (another service's
// AMQP or Kafka client) balances, and a loss shows. A message published by
// lily.Publish, a redelivery, a retry copy back from its bucket and a
// redriven message are already counted and add nothing.
//
// When the count cannot be written (the catalog is down), the batch is
// neither handed out uncounted nor released: a release raises the
// broker's delivery count (RabbitMQ x-delivery-count, Kafka's attempt
// counter), and a consumer retrying through an outage would push healthy
// messages to delivery_limit through the back door (docs/design.md §4). Instead
// the batch is held, unacknowledged, by this Accounted for the receiving
// consumer (queue and p.Consumer), the error (wrapping
// ErrCatalogUnavailable) is returned and logged, and every later Receive
// of that consumer fetches nothing new: it tries to count the held batch
// again and hands it out once counted — exactly once. Held past
// AccountOptions.HoldFor, the batch is given back without raising its
// count where the transport can: Unreceive (transport.Unreceiver), else
// as new copies through a retry bucket (AccountOptions.HoldDelay, with
// headers unchanged, as the runtime's breaker holds deliveries); with
// neither it stays held and the outage is reported again every HoldFor.
// A batch of an ordered queue (p.KeyOrder) on a transport that cannot give
// back in place (Features.UnreceiveInPlace false: RabbitMQ's give-back is
// a copy at the queue's tail) stays held too: a copy behind later
// messages of its keys would break the order the queue promises, and the
// consumer of an ordered queue fetches nothing else meanwhile anyway.
// StopConsumer gives back what is still held the same way.
func (a *Accounted) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	k := holdKey{queue: p.Queue, consumer: p.Consumer}
	if hb := a.hold.take(k); hb != nil {
		return a.countOrHold(ctx, k, hb)
	}
	ds, err := a.Transport.Receive(ctx, p)
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	hb := &heldBatch{ds: ds, ordered: p.KeyOrder}
	hb.keeper = a.keepLeases(p.Queue, p.Consumer, hb)
	return a.countOrHold(ctx, k, hb)
}

// holdKey names one consumer instance of one queue.
type holdKey struct{ queue, consumer string }

// heldBatch is a received batch not counted yet.
type heldBatch struct {
	mu       sync.Mutex // guards ds against its keeper's reads
	ds       []*transport.Delivery
	since    time.Time    // first failed count; zero before
	reported time.Time    // last loud report
	ordered  bool         // received for an ordered queue (ReceiveParams.KeyOrder)
	keeper   *leaseKeeper // extends the batch's leases until it is handed out or given back; nil without leases
}

// deliveries returns what the batch still holds.
func (hb *heldBatch) deliveries() []*transport.Delivery {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.ds
}

// keep makes ds what the batch still holds.
func (hb *heldBatch) keep(ds []*transport.Delivery) {
	hb.mu.Lock()
	hb.ds = ds
	hb.mu.Unlock()
}

// holder keeps the batches that could not be counted, per consumer.
type holder struct {
	mu sync.Mutex
	m  map[holdKey]*heldBatch
}

func (h *holder) take(k holdKey) *heldBatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	hb := h.m[k]
	delete(h.m, k)
	return hb
}

// endKeepers stops the lease keepers of every batch still held.
func (h *holder) endKeepers() {
	h.mu.Lock()
	hbs := make([]*heldBatch, 0, len(h.m))
	for _, hb := range h.m {
		hbs = append(hbs, hb)
	}
	h.mu.Unlock()
	for _, hb := range hbs {
		hb.keeper.end()
	}
}

func (h *holder) put(k holdKey, hb *heldBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[holdKey]*heldBatch{}
	}
	h.m[k] = hb
}

// countOrHold counts hb as accepted and returns it, or holds it (see
// Receive).
func (a *Accounted) countOrHold(ctx context.Context, k holdKey, hb *heldBatch) ([]*transport.Delivery, error) {
	now := a.o.Now()
	trusts, err := a.ledger.trustsMarks(ctx)
	var n int64
	if err == nil {
		toCount := hb.ds
		if trusts {
			toCount = uncounted(hb.ds) // counted on publish or at settlement, or redriven
		}
		if len(toCount) > 0 {
			n, err = a.ledger.countDeliveries(ctx, "accepted", toCount, now)
		}
	}
	if err == nil {
		if !hb.since.IsZero() {
			a.o.Log.Warn("catalog answers again: the held deliveries are counted and handed out",
				"queue", k.queue, "consumer", k.consumer, "count", len(hb.ds), "held_for", now.Sub(hb.since))
		}
		a.recorded(n)
		hb.keeper.end() // the consumer extends them from here
		return hb.ds, nil
	}
	if ctx.Err() != nil {
		// The consumer is stopping, not the catalog failing: keep the batch
		// for StopConsumer to give back.
		a.hold.put(k, hb)
		return nil, ctx.Err()
	}
	if hb.since.IsZero() {
		hb.since, hb.reported = now, now
		a.o.Log.Error("catalog cannot count received messages as accepted: holding them unacknowledged (no release, no delivery count raised) and fetching nothing more until it answers",
			"queue", k.queue, "consumer", k.consumer, "count", len(hb.ds), "hold_for", a.o.HoldFor, "err", err)
	}
	if now.Sub(hb.since) >= a.o.HoldFor {
		how, left, gerr := "", hb.ds, errOrderedInPlace
		if !hb.ordered || a.Features().UnreceiveInPlace {
			how, left, gerr = a.giveBack(ctx, k.consumer, hb.ds)
		}
		given := len(hb.ds) - len(left)
		hb.keep(left)
		if len(left) == 0 {
			hb.keeper.end()
		}
		switch {
		case gerr == nil:
			a.o.Log.Error("catalog still down: gave the held deliveries back without raising their delivery count",
				"queue", k.queue, "consumer", k.consumer, "count", given, "how", how, "held_for", now.Sub(hb.since), "err", err)
			return nil, fmt.Errorf("catalog: count received messages as accepted: %w: %w (gave the held deliveries back by %s after %v)",
				ErrCatalogUnavailable, err, how, now.Sub(hb.since).Round(time.Second))
		case now.Sub(hb.reported) >= a.o.HoldFor:
			hb.reported = now
			a.o.Log.Error("catalog still down: still holding the deliveries unacknowledged (they cannot be given back uncounted, in place)",
				"queue", k.queue, "consumer", k.consumer, "count", len(hb.ds), "held_for", now.Sub(hb.since), "err", err, "give_back_err", gerr)
		}
	}
	a.hold.put(k, hb)
	return nil, fmt.Errorf("catalog: count received messages as accepted: %w: %w (holding %d deliveries of %s unacknowledged since %s; nothing more is fetched until the catalog answers)",
		ErrCatalogUnavailable, err, len(hb.ds), k.queue, hb.since.UTC().Format(time.RFC3339))
}

// errOrderedInPlace: a held batch of an ordered queue is kept rather than
// given back behind later messages of its keys.
var errOrderedInPlace = errors.New("an ordered queue's deliveries are kept held: the transport gives back only to the queue's tail (behind later messages of their keys), so they wait for the catalog in place")

// errCannotGiveBack: the transport has no way to give a delivery back
// without raising its count.
var errCannotGiveBack = errors.New("no way to give deliveries back uncounted: the transport is no transport.Unreceiver, and no retry bucket is known (AccountOptions.HoldDelay)")

// giveBack returns ds to the transport without raising their delivery
// count, says how, and returns those it could not give back (all of them,
// or, when the transport applied some settlements, the others).
func (a *Accounted) giveBack(ctx context.Context, consumer string, ds []*transport.Delivery) (string, []*transport.Delivery, error) {
	if len(ds) == 0 {
		return "nothing", nil, nil
	}
	if u, ok := a.Transport.(transport.Unreceiver); ok {
		if err := u.Unreceive(ctx, &transport.UnreceiveParams{Consumer: consumer, Deliveries: ds}); err != nil {
			return "unreceive", ds, err
		}
		return "unreceive", nil, nil
	}
	if !a.Features().DelayedRetry || a.o.HoldDelay == nil {
		return "", ds, errCannotGiveBack
	}
	ss := make([]transport.Settlement, len(ds))
	for i, d := range ds {
		delay := a.o.HoldDelay(d.Queue)
		if delay <= 0 {
			return "", ds, fmt.Errorf("%w (HoldDelay(%q) = %v)", errCannotGiveBack, d.Queue, delay)
		}
		// A new copy in a bucket with the headers as received: x-retry-count
		// unchanged, its delivery count starting again; it is counted as
		// accepted when it comes back (it was not counted now).
		ss[i] = transport.Settlement{Delivery: d, Action: transport.Retry, Delay: delay, Headers: transport.CloneHeaders(d.Headers)}
	}
	err := a.Transport.Settle(ctx, &transport.SettleParams{Settlements: ss})
	if err == nil {
		return "retry bucket", nil, nil
	}
	var left []*transport.Delivery
	for i, e := range transport.SettleErrors(err, len(ds)) {
		if e != nil {
			left = append(left, ds[i])
		}
	}
	return "retry bucket", left, err
}

// StopConsumer gives back what this Accounted still holds for the consumer
// (see Receive), then delegates to the wrapped transport (a no-op without
// one).
func (a *Accounted) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	var errs []error
	hb := a.hold.take(holdKey{queue: p.Queue, consumer: p.Consumer})
	if hb != nil {
		hb.keeper.end() // given back, or left to the broker, below
	}
	if hb != nil && p.Ordered && !a.Features().UnreceiveInPlace {
		// Giving them back would put them behind later messages of their
		// keys (RabbitMQ: a copy at the queue's tail). Left unacknowledged,
		// the broker returns them in place when the session ends, counted
		// once more: for an ordered queue, order wins (docs/design.md §4).
		a.o.Log.Warn("left held deliveries of an ordered queue to the broker at stop: they come back in place, counted once more",
			"queue", p.Queue, "consumer", p.Consumer, "count", len(hb.ds))
		hb = nil
	}
	if hb != nil {
		how, left, err := a.giveBack(ctx, p.Consumer, hb.ds)
		if err != nil {
			errs = append(errs, fmt.Errorf("catalog: give back %d uncounted deliveries of %s at stop: %w (they come back when the consumer's session ends, counted once more)", len(left), p.Queue, err))
		} else {
			a.o.Log.Warn("gave back uncounted deliveries at stop", "queue", p.Queue, "consumer", p.Consumer, "count", len(hb.ds), "how", how)
		}
	}
	if s, ok := a.Transport.(transport.ConsumerStopper); ok {
		errs = append(errs, s.StopConsumer(ctx, p))
	}
	return errors.Join(errs...)
}

// pruneTrigger decides when an Accounted prunes the ledger.
type pruneTrigger struct {
	since   atomic.Int64 // rows recorded since the last prune
	last    atomic.Int64 // Unix ns of the last prune
	running atomic.Bool
	mu      sync.Mutex // orders wg.Add before Close's wg.Wait
	closed  bool
	wg      sync.WaitGroup
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
}

// recorded notes n rows recorded and, when AccountOptions.PruneEvery rows
// or PruneInterval passed since the last prune, prunes the ledger in the
// background (one prune at a time; Close waits for it), so that no
// Receive or Settle waits for a prune. A failed prune is logged, never the
// caller's error.
func (a *Accounted) recorded(n int64) {
	if n <= 0 || a.o.PruneEvery < 0 {
		return
	}
	since := a.prune.since.Add(n)
	now := a.o.Now()
	if since < int64(a.o.PruneEvery) && now.Sub(time.Unix(0, a.prune.last.Load())) < a.o.PruneInterval {
		return
	}
	if !a.prune.running.CompareAndSwap(false, true) {
		return
	}
	a.prune.mu.Lock()
	if a.prune.closed {
		a.prune.mu.Unlock()
		a.prune.running.Store(false)
		return
	}
	a.prune.wg.Add(1)
	a.prune.mu.Unlock()
	a.prune.since.Store(0)
	a.prune.last.Store(now.UnixNano())
	go func() {
		defer a.prune.wg.Done()
		defer a.prune.running.Store(false)
		res, err := a.ledger.Prune(a.prune.ctx, now)
		switch {
		case err != nil && a.prune.ctx.Err() == nil:
			a.o.Log.Error("pruning the ledger failed; its per-event rows grow until a prune succeeds", "err", err, "horizon", a.ledger.Horizon())
		case res.Events > 0:
			a.o.Log.Debug("pruned the ledger", "events", res.Events, "cutoff", res.Cutoff.UTC().Format(time.RFC3339))
		}
	}()
}

// Close stops the heartbeats and a prune in progress (what it folded
// stays folded), waits for them, and closes the wrapped transport.
func (a *Accounted) Close() error {
	a.hold.endKeepers()
	a.beat.Close()
	a.prune.mu.Lock()
	a.prune.closed = true
	a.prune.mu.Unlock()
	a.prune.cancel()
	a.prune.wg.Wait()
	return a.Transport.Close()
}
