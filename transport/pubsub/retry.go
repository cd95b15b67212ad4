package pubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/lily-mq/lily/transport"
)

// pending is a retry copy pulled from its delay subscription and due so
// soon (HoldInProcess) that the transport keeps it — no handler, no worker —
// and forwards it when due.
type pending struct {
	sub   string
	ackID string
	msg   *pubsubpb.PubsubMessage
	due   time.Time
}

// buckets returns the delay buckets of queue: the registered spec's.
func (t *Transport) buckets(queue string) []int64 {
	spec, _ := t.specs.Lookup(queue)
	return spec.BucketsMillis
}

// moveDue forwards the queue's due retry copies from their delay
// subscriptions to the retry-return topic (publish confirmed, then ack in
// the delay subscription), and hides copies not yet due: one due within
// HoldInProcess is kept in the transport, a later one gets an ack deadline
// of its remaining time (ModifyAckDeadline, whole seconds up to 600, again
// and again for longer delays), so that the service hands it back when it
// is due. Delay subscriptions have no dead-letter policy, so these holds
// spend no delivery attempt. At most one moveDue runs per queue at a time,
// at most once per PollInterval.
func (t *Transport) moveDue(ctx context.Context, queue, sub string) error {
	bs := t.buckets(queue)
	if len(bs) == 0 {
		return nil
	}
	t.mu.Lock()
	if last, busy := t.moved[queue]; busy && (last.IsZero() || time.Since(last) < t.o.PollInterval) {
		t.mu.Unlock()
		return nil
	}
	t.moved[queue] = time.Time{} // busy
	held := t.holds[queue]
	t.holds[queue] = nil
	t.mu.Unlock()
	var keep []*pending
	defer func() {
		t.mu.Lock()
		t.holds[queue] = append(t.holds[queue], keep...)
		t.moved[queue] = time.Now()
		t.mu.Unlock()
	}()
	var errs []error
	for _, ms := range bs {
		ds := DelayTopic(sub, ms)
		rctx, cancel := t.rpc(ctx)
		resp, err := t.sub.Pull(rctx, &pubsubpb.PullRequest{Subscription: t.subPath(ds), MaxMessages: 500, ReturnImmediately: true})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				errs = append(errs, fmt.Errorf("pull %s: %w", ds, err))
			}
			continue
		}
		now := time.Now()
		var later []*transport.Delivery
		var laterSecs []int32
		for _, rm := range resp.ReceivedMessages {
			_, internal := DecodeAttributes(rm.Message.Attributes)
			dueMs, ok := dueAt(internal)
			due := time.UnixMilli(dueMs)
			if !ok {
				due = now // a copy without due time is due
			}
			p := &pending{sub: ds, ackID: rm.AckId, msg: rm.Message, due: due}
			switch wait := due.Sub(now); {
			case wait <= 0:
				held = append(held, p)
			case wait <= t.o.HoldInProcess:
				held = append(held, p)
			default:
				later = append(later, &transport.Delivery{Receipt: &receipt{sub: ds, ackID: rm.AckId}})
				laterSecs = append(laterSecs, int32(min((wait+time.Second-1)/time.Second, 600)))
			}
		}
		for i, d := range later {
			if err := t.modify(ctx, []*transport.Delivery{d}, laterSecs[i])[0]; err != nil {
				errs = append(errs, err)
			}
		}
	}
	now := time.Now()
	var due []*pending
	for _, p := range held {
		if p.due.After(now) {
			keep = append(keep, p)
		} else {
			due = append(due, p)
		}
	}
	if len(due) > 0 {
		if err := t.forward(ctx, sub, due); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// forward publishes due copies to the retry-return topic and, once
// confirmed, acks them in their delay subscriptions. A crash between the
// two leaves a second copy (at least once; same event ID).
func (t *Transport) forward(ctx context.Context, sub string, ps []*pending) error {
	msgs := make([]*pubsubpb.PubsubMessage, len(ps))
	for i, p := range ps {
		attrs := maps.Clone(p.msg.Attributes)
		delete(attrs, AttrDueAt)
		msgs[i] = &pubsubpb.PubsubMessage{Data: p.msg.Data, Attributes: attrs, OrderingKey: p.msg.OrderingKey}
	}
	if _, err := t.publish(ctx, ReturnTopic(sub), msgs); err != nil {
		// Not acked: the delay subscription hands them out again after
		// its ack deadline.
		return fmt.Errorf("forward due retries to %s: %w", ReturnTopic(sub), err)
	}
	ds := make([]*transport.Delivery, len(ps))
	for i, p := range ps {
		ds[i] = &transport.Delivery{Receipt: &receipt{sub: p.sub, ackID: p.ackID}}
	}
	return errors.Join(t.acknowledge(ctx, ds)...)
}

// dropHolds gives the transport's held retry copies back to their delay
// subscriptions (at Close).
func (t *Transport) dropHolds(ctx context.Context) {
	t.mu.Lock()
	var ds []*transport.Delivery
	for q, ps := range t.holds {
		for _, p := range ps {
			ds = append(ds, &transport.Delivery{Receipt: &receipt{sub: p.sub, ackID: p.ackID}})
		}
		delete(t.holds, q)
	}
	t.mu.Unlock()
	if len(ds) > 0 {
		t.modify(ctx, ds, 0)
	}
}
