package lily

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"

	"github.com/lily-mq/lily/transport"
)

// settleLoop commits the workers' decisions in batches (group commit): it
// takes what is waiting, up to SettleBatch, and settles it in one call.
// A settlement that fails leaves the original unacknowledged; a failed
// retry or dead-letter hand-off is released for redelivery and reported.
//
// When the transport settles concurrent calls in parallel
// (transport.ConcurrentSettler) and the queue's ordering is "reorder", up
// to SettleConcurrency batches are in flight at once: a batch is cut when
// a slot is free, so the next one gathers what arrived meanwhile. Otherwise
// one batch at a time, in order.
func (c *Consumer) settleLoop(ctx context.Context, in <-chan settleReq) {
	defer c.dlLog.flush(c.log)
	par := 1
	if cs, ok := c.t.(transport.ConcurrentSettler); ok && c.o.Queue.Ordering == OrderingReorder {
		par = max(1, cs.SettleConcurrency())
	}
	if par == 1 {
		batch := make([]settleReq, 0, c.o.SettleBatch)
		ss := make([]transport.Settlement, 0, c.o.SettleBatch)
		for first := range in {
			runtime.Gosched() // see batchYield
			batch = c.fillBatch(append(batch[:0], first), in)
			ss = c.settleBatch(ctx, batch, ss)
		}
		return
	}
	slots := make(chan struct{}, par)
	var wg sync.WaitGroup
	scratch := make([]settleReq, 0, c.o.SettleBatch)
	for first := range in {
		slots <- struct{}{} // wait for a free slot before cutting the batch
		runtime.Gosched()   // see batchYield
		scratch = c.fillBatch(append(scratch[:0], first), in)
		batch := slices.Clone(scratch)
		clear(scratch) // drop the references for the collector
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.settleBatch(ctx, batch, nil)
			<-slots
		}()
	}
	wg.Wait()
}

// batchYield: before cutting a batch the settler yields once, so that
// workers that are about to hand in their decisions (runnable, not yet run)
// do so and join the batch. Without it a fast transport (acknowledgements
// only) took them one at a time — RabbitMQ: 14,609 Settle calls for 20,000
// acks, each a frame and a write — and with it they share a call and, when
// contiguous, one multiple ack. It delays a settlement by one scheduling
// round at most; nothing waits on a timer.

// fillBatch appends to batch what is waiting in in, up to SettleBatch,
// without blocking.
func (c *Consumer) fillBatch(batch []settleReq, in <-chan settleReq) []settleReq {
	for len(batch) < c.o.SettleBatch {
		select {
		case r, ok := <-in:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// settleBatch settles one batch through the transport, reports each
// outcome, releases the originals of failed hand-offs and returns the
// batch's tickets. ss is scratch space; it is returned for reuse.
func (c *Consumer) settleBatch(ctx context.Context, batch []settleReq, ss []transport.Settlement) []transport.Settlement {
	if ss == nil {
		ss = make([]transport.Settlement, 0, len(batch))
	}
	ss = ss[:0]
	for _, r := range batch {
		ss = append(ss, r.s)
	}
	var refused map[int]string // dead letters stored in the catalog: the broker refused their copies
	onStored := func(i int, why string) {
		if refused == nil {
			refused = map[int]string{}
		}
		refused[i] = why
	}
	handOffs := c.startHandOffs(batch)
	errs := transport.SettleErrors(c.t.Settle(ctx, &transport.SettleParams{Settlements: ss, OnStored: onStored}), len(ss))
	c.endHandOffs(handOffs, errs, refused)
	var releases []transport.Settlement
	for i, r := range batch {
		if r.done != nil {
			r.done <- errs[i]
		}
		endAttempt(r, errs[i])
		if errs[i] == nil {
			if r.s.Action == transport.DeadLetter && r.ev.Kind == EventDeadLettered {
				// Logged once the hand-off is confirmed, never at decision time.
				c.dlLog.log(c.log, c.o.Now(), r.s.Delivery.EventID, r.s.Reason, r.logDead)
			}
			if why, ok := refused[i]; ok {
				r.ev.Refused = why
				c.log.Error("the broker refused the dead-letter copy; the dead letter is stored in the catalog only: an operator must drain or enlarge the dead-letter queue",
					"event_id", r.s.Delivery.EventID, "reason", r.s.Reason, "why", why)
			}
			c.observe(ctx, r.ev)
			continue
		}
		c.log.Error("settlement not confirmed; the original stays unacknowledged",
			"event_id", r.s.Delivery.EventID, "action", r.s.Action.String(), "err", errs[i])
		c.observe(ctx, Event{Kind: EventSettleFailed, Queue: r.ev.Queue, EventID: r.ev.EventID, Reason: r.ev.Reason, Err: errs[i]})
		if r.s.Action != transport.Release && !errors.Is(errs[i], transport.ErrLeaseLost) {
			releases = append(releases, transport.Settlement{Delivery: r.s.Delivery, Action: transport.Release})
		}
	}
	if len(releases) > 0 {
		// Best effort: if the release fails too, the broker or the lease
		// timeout redelivers the original.
		if err := c.t.Settle(ctx, &transport.SettleParams{Settlements: releases}); err != nil {
			c.log.Error("release after failed settlement failed; redelivery will follow the lease timeout", "err", err)
		}
	}
	ts := make([]*ticket, len(batch))
	for i, r := range batch {
		ts[i] = r.t
	}
	c.finish(ts...)
	return ss
}
