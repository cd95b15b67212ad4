package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The fence before a consumer's channel closes (quiet.go says why it is
// needed). A quiet wait only makes a lost acknowledgement unlikely: on a
// loaded machine the quorum queue's Raft log fell more than 2 s behind and
// a graceful hand-over's stashed acknowledgements were dropped at the
// close — messages handled once came back with Lily-Delivery-Count 2
// (TestConsumeCompeteRabbitMQ, 2 runs of 20 under load).
//
// What the broker guarantees instead: the channel's quorum-queue client
// sends its stashed settlements in the same step in which the queue tells
// it that enough earlier commands were applied — the step that also
// confirms the channel's publishes to that queue. So a publish to the
// queue on the consumer's own channel, once confirmed, proves that every
// settlement sent before it was applied or is on its way to the queue,
// ahead of the channel's close. The message published is a real one: the
// fence takes the queue's head with basic.get and gives it back as a
// confirmed copy (its count carried, as every give-back), then
// acknowledges the original — one frame, which cannot be stashed that
// soon after the fence. An empty queue answers the get with get-empty:
// the get is a command the queue applies only after the channel's earlier
// ones, but a stash is sent when the queue's notice of those reaches the
// channel, which may be just after the get's answer; a second get, read
// by the channel a client round trip later, comes after that notice. This
// case is ordered by the broker's scheduling, not by a confirm; it is the
// end of a workload, when nothing was stashed for long. A queue that keeps per-key order is not fenced (a get would
// bypass its single active consumer); it settles one delivery at a time,
// and keeps the quiet wait.

// errNotFenced: a per-key order queue's channel is closed after the quiet
// wait, by design (see above), not for want of a fence.
var errNotFenced = errors.New("a per-key order queue is not fenced")

// fenceTimeout bounds a fence's publish confirm.
const fenceTimeout = 30 * time.Second

// closeSettled closes c's channel once the settlements sent on it can no
// longer be dropped by the close: after a fence, or, where no fence can be
// made, after the quiet wait. c.mu is not held.
func (c *consumer) closeSettled(ctx context.Context) {
	if err := c.fence(ctx); err != nil {
		if !errors.Is(err, errNotFenced) {
			c.t.opts.Logger.Warn("rabbitmq: could not fence the acknowledgements before closing a consumer's channel; waiting quietly instead",
				"queue", c.key.queue, "instance", c.key.instance, "err", err)
		}
		sleepCtx(ctx, c.quietWait())
	}
	c.invalidate()
}

// fence makes sure that every settlement sent on c's channel has reached
// its queue (see above). It reports an error when it could not; nothing
// is lost then, the caller falls back to the quiet wait.
func (c *consumer) fence(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled.unfenced == 0 || c.ch == nil || c.ch.IsClosed() || c.dead {
		return nil
	}
	if c.keyOrder {
		return errNotFenced
	}
	var d amqp.Delivery
	for try := 1; ; try++ {
		var ok bool
		var err error
		d, ok, err = c.ch.Get(c.key.queue, false)
		if ae := (*amqp.Error)(nil); errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return nil // the queue is gone, and what it held with it: nothing to fence
		}
		if err != nil {
			return fmt.Errorf("basic.get: %w", err)
		}
		if ok {
			break
		}
		if try == 2 {
			c.settled.unfenced = 0
			return nil // get-empty twice: see above
		}
	}
	c.saw(d.DeliveryTag)
	pub, err := giveBackPublishing(delivery(c.key.queue, &d), &d)
	if err != nil {
		return fmt.Errorf("the fence's copy of the queue's head: %w", err)
	}
	if err := c.ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	returns := c.ch.NotifyReturn(make(chan amqp.Return, 1))
	cctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(cctx, "", c.key.queue, true, false, pub)
	if err != nil {
		return fmt.Errorf("publishing the fence's copy: %w", err)
	}
	if acked, err := dc.WaitContext(cctx); err != nil || !acked {
		return fmt.Errorf("the fence's copy not confirmed (acked %v): %v", acked, err)
	}
	select {
	case r := <-returns:
		return fmt.Errorf("the fence's copy was returned: %s", r.ReplyText)
	default:
	}
	// The copy is in the queue: the original goes (closing without this
	// ack would return it counted, beside its copy).
	c.settled.unfenced = 0
	if err := c.ch.Ack(d.DeliveryTag, false); err != nil {
		return fmt.Errorf("acknowledging the fence's original: %w", err)
	}
	return nil
}
