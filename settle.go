package lily

import (
	"context"
	"errors"

	"github.com/lily-mq/lily/transport"
)

// settleLoop commits the workers' decisions in batches (group commit): it
// takes what is waiting, up to SettleBatch, and settles it in one call.
// A settlement that fails leaves the original unacknowledged; a failed
// retry or dead-letter hand-off is released for redelivery and reported.
func (c *Consumer) settleLoop(ctx context.Context, in <-chan settleReq) {
	batch := make([]settleReq, 0, c.o.SettleBatch)
	ss := make([]transport.Settlement, 0, c.o.SettleBatch)
	for first := range in {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < c.o.SettleBatch {
			select {
			case r, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		ss = ss[:0]
		for _, r := range batch {
			ss = append(ss, r.s)
		}
		errs := transport.SettleErrors(c.t.Settle(ctx, &transport.SettleParams{Settlements: ss}), len(ss))
		var releases []transport.Settlement
		for i, r := range batch {
			if r.done != nil {
				r.done <- errs[i]
			}
			if errs[i] == nil {
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
		c.release(len(batch))
	}
}
