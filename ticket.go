package lily

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/transport"
)

// ticket is one delivery's lifetime in the consumer (docs/design.md §4, "one ticket
// per delivery"): taken when the delivery is received and returned exactly
// once, by finish, after its settlement (or when it is given back unseen).
// What the delivery holds is returned with it: its prefetch slot, its lease
// (no longer extended), and the breaker's probe token when it was the
// half-open probe. A handler abandoned past its timeout is not part of the
// ticket: it keeps its handler slot until it returns (see call).
type ticket struct {
	d     *transport.Delivery
	probe uint64 // the breaker's probe token; 0: not the probe
	// span is the handler attempt's span while tracing, from decide until
	// the settler ends it with the decision that settled the ticket
	// (endAttempt): a decision replaced by another (ordering's release)
	// needs no hand-over. Set by the worker before it hands the decision
	// to the settler, read by the settler after: the channel orders them.
	span trace.Span

	// Under Consumer.mu.
	leased time.Time // when its lease was taken or last extended
	done   bool
}

// take issues a ticket for each delivery of one Receive call; asked is
// when the call began (the leases were taken after it: the extension
// counts from it, to be early rather than late).
func (c *Consumer) take(ds []*transport.Delivery, probe uint64, asked time.Time) []*ticket {
	if len(ds) == 0 {
		return nil
	}
	now := asked
	ts := make([]*ticket, len(ds))
	c.mu.Lock()
	for i, d := range ds {
		ts[i] = &ticket{d: d, leased: now}
		if c.held != nil {
			c.held[ts[i]] = struct{}{}
		}
	}
	ts[0].probe = probe // a probe is fetched alone
	c.inflight += len(ds)
	c.mu.Unlock()
	return ts
}

// finish returns tickets: the one place where a delivery's prefetch slot,
// lease extension and probe token end. A ticket returned twice is ignored.
func (c *Consumer) finish(ts ...*ticket) {
	var probes []uint64
	c.mu.Lock()
	for _, t := range ts {
		if t == nil || t.done {
			continue
		}
		t.done = true
		c.inflight--
		if c.held != nil {
			delete(c.held, t)
		}
		if t.probe != 0 {
			probes = append(probes, t.probe)
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, p := range probes {
		// A probe settled without an outcome for the breaker (dead-lettered
		// before its handler ran, parked, released) gives its token back,
		// so that the next fetch probes again.
		c.br.endProbe(p)
	}
}

// giveBack returns deliveries that no handler saw. A transport that can
// (transport.Unreceiver: SQLite in place, RabbitMQ by a confirmed copy to
// the queue's tail, a redelivery's count carried on the copy) takes them
// back uncounted; what it cannot — a delivery the transport refuses, or
// anything of an ordered queue whose transport would not put it back in
// place — is processed as usual, since giving it back otherwise would
// raise its delivery count (a requeue) or lose its place.
func (c *Consumer) giveBack(base context.Context, ts []*ticket, work chan<- *ticket) {
	if len(ts) == 0 {
		return
	}
	if c.unrecv == nil || (c.ordered() && !c.features.UnreceiveInPlace) {
		c.processAll(base, ts, work)
		return
	}
	ds := make([]*transport.Delivery, len(ts))
	for i, t := range ts {
		ds[i] = t.d
	}
	err := c.unrecv.Unreceive(base, &transport.UnreceiveParams{Consumer: c.o.Instance, Deliveries: ds})
	if err == nil {
		c.log.Debug("gave back deliveries no handler saw, uncounted", "count", len(ds))
		c.finish(ts...)
		return
	}
	if errors.Is(err, errors.ErrUnsupported) {
		c.processAll(base, ts, work)
		return
	}
	var se *transport.SettleError
	if !errors.As(err, &se) || len(se.Errs) != len(ts) {
		c.log.Warn("giving back deliveries no handler saw failed; processing them instead", "count", len(ds), "err", err)
		c.processAll(base, ts, work)
		return
	}
	var back, keep []*ticket
	for i, t := range ts {
		switch e := se.Errs[i]; {
		case e == nil:
			back = append(back, t)
		case errors.Is(e, transport.ErrLeaseLost):
			// Someone else holds it now: neither give back nor process.
			back = append(back, t)
		default:
			keep = append(keep, t)
		}
	}
	c.log.Debug("gave back deliveries no handler saw, uncounted; processing the rest", "given_back", len(back), "processed", len(keep))
	c.finish(back...)
	c.processAll(base, keep, work)
}

// processAll dispatches ts to the workers in order, a redelivery alone.
func (c *Consumer) processAll(base context.Context, ts []*ticket, work chan<- *ticket) {
	for i, t := range ts {
		if t.d.DeliveryCount > 1 {
			c.waitIdle(base, len(ts)-i)
		}
		c.dispatch(base, t, work)
	}
}

// dispatch hands t to a worker, or queues it behind its key.
func (c *Consumer) dispatch(ctx context.Context, t *ticket, work chan<- *ticket) bool {
	if key := c.orderKey(t.d); c.ordered() && key != "" && c.queueBehindKey(key, t) {
		return true
	}
	select {
	case work <- t:
		return true
	case <-ctx.Done():
		return false
	}
}

// window is how many deliveries the consumer may hold at once. On a
// transport with leases it is what the workers can start within half a
// lease at the handlers' observed pace — never the whole Prefetch when
// handlers are slow, so that competing consumers share the queue and no
// lease runs out in Lily's own buffer. Before any handler has returned it
// is twice the concurrency.
func (c *Consumer) window() int {
	if c.lease <= 0 {
		return c.o.Prefetch
	}
	avg := time.Duration(c.avgCall.Load())
	if avg <= 0 {
		return min(c.o.Prefetch, 2*c.o.Concurrency)
	}
	ahead := int64(c.lease/2) / int64(avg) * int64(c.o.Concurrency)
	if ahead > int64(c.o.Prefetch) {
		return c.o.Prefetch
	}
	return min(c.o.Prefetch, c.o.Concurrency+int(ahead))
}

// observeCall feeds the handler pace (exponentially weighted, 1/8).
func (c *Consumer) observeCall(took time.Duration) {
	took = max(took, time.Microsecond)
	for {
		old := c.avgCall.Load()
		next := int64(took)
		if old > 0 {
			next = old + (int64(took)-old)/8
		}
		if c.avgCall.CompareAndSwap(old, next) {
			return
		}
	}
}

// extendLoop extends the leases of the deliveries the consumer holds,
// until ctx is done: every tenth of a lease it extends those taken or last
// extended half a lease ago or more, so that each lease is renewed when
// between half and three fifths of it has run (docs/design.md §4.5). A
// lease is renewed once per half lease, not every tick: each renewal is a
// request per delivery (SQS, Pub/Sub, Azure Storage queues, NATS), and a
// consumer holding a full prefetch window that renewed every fifth of a
// lease sent hundreds a second, enough to slow an emulator's answers past
// the lease they were renewing.
func (c *Consumer) extendLoop(ctx context.Context) {
	t := time.NewTicker(c.lease / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.extend(ctx)
	}
}

// extend renews the leases taken or last renewed half a lease ago or more.
func (c *Consumer) extend(ctx context.Context) {
	age := c.lease / 2
	now := c.o.Now()
	var ts []*ticket
	c.mu.Lock()
	for t := range c.held {
		if now.Sub(t.leased) >= age {
			ts = append(ts, t)
		}
	}
	c.mu.Unlock()
	if len(ts) == 0 {
		return
	}
	ds := make([]*transport.Delivery, len(ts))
	for i, t := range ts {
		ds[i] = t.d
	}
	err := c.extender.ExtendLeases(ctx, &transport.ExtendParams{Consumer: c.o.Instance, Deliveries: ds, For: c.lease})
	errs := transport.SettleErrors(err, len(ts))
	var failed []int
	var ages []time.Duration
	c.mu.Lock()
	for i, t := range ts {
		switch {
		case errs[i] == nil:
			t.leased = now
		case !t.done: // a ticket returned meanwhile (settled, given back) needs no lease
			failed = append(failed, i)
			ages = append(ages, now.Sub(t.leased))
		}
	}
	c.mu.Unlock()
	for k, i := range failed {
		if ctx.Err() == nil {
			c.log.Warn("extending a lease failed; the delivery may be handed out again when its lease runs out",
				"event_id", ts[i].d.EventID, "lease_age", ages[k], "took", c.o.Now().Sub(now), "err", errs[i])
		}
	}
}

// checkLease refuses a configuration whose work on one delivery cannot fit
// in the transport's lease when the transport cannot extend leases: the
// delivery would be handed out again while its handler still runs.
func checkLease(t transport.Transport, o ConsumerOptions) error {
	ft := transport.FeaturesOf(t, o.Queue.Name)
	if !ft.Leases || ft.VisibilityTimeout <= 0 {
		return nil
	}
	if _, ok := t.(transport.LeaseExtender); ok {
		return nil
	}
	q, s := o.Queue, o.Queue.Settings()
	call := time.Duration(s.HandlerTimeoutMillis)*time.Millisecond + o.AbandonGrace
	budget := time.Duration(q.ImmediateRetries+1)*call + time.Duration(q.ImmediateRetries)*time.Duration(s.ImmediateRetryMillis)*time.Millisecond
	if budget < ft.VisibilityTimeout {
		return nil
	}
	return fmt.Errorf("%w: queue %s: handler_timeout_millis %d + AbandonGrace %s, times 1 + immediate_retries %d (with immediate_retry_millis %d between), is %s: not less than the transport's lease %s, which it cannot extend; "+
		"a delivery (and the graceful stop's drain) would outlive its lease and be handed out twice. Lower handler_timeout_millis or immediate_retries, or lengthen the transport's visibility timeout",
		ErrInvalidConfig, q.Name, s.HandlerTimeoutMillis, o.AbandonGrace, q.ImmediateRetries, s.ImmediateRetryMillis, budget, ft.VisibilityTimeout)
}

// errNotStarted marks a delivery whose handler could not start at stop:
// every handler slot is held by an abandoned handler.
var errNotStarted = errors.New("consumer stopping and every handler slot is held by an abandoned handler")
