package lily

import (
	"context"

	"github.com/lily-mq/lily/transport"
)

// obeyPause holds the fetch loop while the consumer's queue is paused
// (docs/design.md §9.10), as an open breaker does: nothing is fetched, so
// the messages wait at the source with their counts untouched, and what
// is in hand is finished and settled. Reaching the pause and leaving it
// are reported to the Presence (the heartbeat then says "paused") and to
// the hooks (EventPaused, EventResumed). It returns false when ctx ended.
func (c *Consumer) obeyPause(ctx context.Context) bool {
	if c.pres == nil {
		return true
	}
	for {
		paused, changed := c.pres.QueuePaused(c.o.Queue.Name)
		if !paused {
			if c.paused.CompareAndSwap(true, false) {
				c.log.Info("queue resumed: fetching again")
				c.report(ctx, false)
				c.observe(ctx, Event{Kind: EventResumed, Queue: c.o.Queue.Name})
			}
			return true
		}
		if c.paused.CompareAndSwap(false, true) {
			c.log.Warn("queue paused by an operator: fetching stops; what is in hand is finished")
			c.report(ctx, false)
			c.observe(ctx, Event{Kind: EventPaused, Queue: c.o.Queue.Name})
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// report tells the Presence the consumer's state; stopped ends its
// presence.
func (c *Consumer) report(ctx context.Context, stopped bool) {
	if c.pres == nil {
		return
	}
	c.pres.ReportConsumer(context.WithoutCancel(ctx), transport.ConsumerState{
		Queue: c.o.Queue.Name, Instance: c.o.Instance, Name: c.o.Name, Version: c.o.Version,
		Breaker: string(c.BreakerState()), Paused: c.paused.Load(), Stopped: stopped,
	})
}

// Paused reports whether the consumer's queue is paused and its fetching
// held (docs/design.md §9.10).
func (c *Consumer) Paused() bool { return c.paused.Load() }
