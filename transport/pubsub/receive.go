package pubsub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lily-mq/lily/transport"
)

// receipt is a delivery's settlement handle.
type receipt struct {
	sub      string // subscription ID it was pulled from
	main     string // the queue's main subscription
	ackID    string
	pulledAt time.Time
}

// Receive pulls up to p.Max deliveries from the queue's subscription and
// its retry-return subscription, waiting up to p.Wait. The delivery count
// is the subscription's DeliveryAttempt, which the service keeps only for
// subscriptions with a dead-letter policy: Receive refuses a subscription
// without one (ErrUnsafeQueue). Each call also moves the queue's due retry
// copies out of their delay subscriptions (see the package doc).
//
// With p.IsolateRedeliveries a batch stops before its first redelivery and
// a redelivery is handed out alone; what was pulled and not handed out
// waits in the transport (its ack deadline kept extended) for the next
// Receive. Pub/Sub counts a delivery attempt when a message is pulled, so
// the transport pulls no more than p.Max.
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	if t.isClosed() {
		return nil, transport.ErrClosed
	}
	max := max(p.Max, 1)
	n := t.Names(p.Queue)
	if err := t.checkSubscription(ctx, p.Queue, n.Subscription); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.Wait)
	for {
		if err := t.moveDue(ctx, p.Queue, n.Subscription); err != nil && ctx.Err() == nil {
			t.o.Logger.Warn("moving due retries failed; they stay in their delay subscription", "queue", p.Queue, "err", err)
		}
		ds := t.takeBuffered(ctx, p.Queue, max)
		subs := []string{n.Subscription}
		if t.hasReturn(ctx, p.Queue) {
			subs = append(subs, ReturnTopic(n.Subscription))
		}
		for _, sub := range subs {
			if len(ds) >= max {
				break
			}
			got, err := t.pull(ctx, p.Queue, sub, t.pullMax(p.Queue, max-len(ds)))
			if err != nil {
				if len(ds) > 0 {
					t.buffer(p.Queue, ds)
				}
				return nil, err
			}
			t.observe(p.Queue, got)
			ds = append(ds, got...)
		}
		if len(ds) > 0 {
			if p.IsolateRedeliveries {
				var rest []*transport.Delivery
				ds, rest = isolate(ds)
				if !p.KeyOrder && len(ds) == 1 && ds[0].DeliveryCount > 1 && len(rest) > 0 {
					rest = t.giveBack(ctx, p.Queue, rest)
				}
				t.buffer(p.Queue, rest)
			}
			t.hold(p.Consumer, ds)
			return ds, nil
		}
		if !time.Now().Before(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(min(t.o.PollInterval, time.Until(deadline))):
		}
	}
}

// isolate hands out a batch's first deliveries and keeps back its
// redeliveries (and, for keyed messages, every later message of a key
// kept back), so that first deliveries are not held behind a redelivery;
// a batch of redeliveries only gives its first one, alone.
func isolate(ds []*transport.Delivery) (take, rest []*transport.Delivery) {
	blocked := map[string]bool{}
	for _, d := range ds {
		if d.DeliveryCount > 1 || (d.Key != "" && blocked[d.Key]) {
			rest = append(rest, d)
			if d.Key != "" {
				blocked[d.Key] = true
			}
			continue
		}
		take = append(take, d)
	}
	if len(take) == 0 {
		return rest[:1], rest[1:]
	}
	return take, rest
}

// pullMax is how many messages to pull from queue's subscriptions: one at
// a time while the transport is cautious — from its start, and after it
// pulled a redelivery, until it pulls a first delivery — since Pub/Sub
// counts a delivery attempt for every message pulled, and a process that
// dies gives back (raised) all it pulled.
func (t *Transport) pullMax(queue string, want int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.bold[queue] {
		return 1
	}
	return want
}

// observe updates queue's caution from a pulled batch.
func (t *Transport) observe(queue string, ds []*transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	first, redelivered := false, false
	for _, d := range ds {
		if d.DeliveryCount > 1 {
			redelivered = true
		} else {
			first = true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case redelivered:
		t.bold[queue] = false
	case first:
		t.bold[queue] = true
	}
}

// checkSubscription refuses, once per subscription, one without a
// dead-letter policy: it counts no delivery attempts, so a message that
// kills its consumer would be redelivered forever.
func (t *Transport) checkSubscription(ctx context.Context, queue, sub string) error {
	t.mu.Lock()
	ok := t.checked[sub]
	t.mu.Unlock()
	if ok {
		return nil
	}
	rctx, cancel := t.rpc(ctx)
	s, err := t.sub.GetSubscription(rctx, &pubsubpb.GetSubscriptionRequest{Subscription: t.subPath(sub)})
	cancel()
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("pubsub: queue %s: subscription %s: %w: run lily topology apply", queue, sub, transport.ErrUnknownQueue)
		}
		return fmt.Errorf("pubsub: queue %s: get subscription %s: %w", queue, sub, err)
	}
	dl := s.GetDeadLetterPolicy()
	if dl.GetDeadLetterTopic() == "" {
		return fmt.Errorf("pubsub: queue %s: subscription %s has no dead-letter policy, so Pub/Sub counts no delivery attempts and a message that kills its consumer is redelivered forever: %w; "+
			"run lily topology apply (it sets a dead-letter policy to %s)", queue, sub, transport.ErrUnsafeQueue, DeadLetterTopic(sub))
	}
	if spec, ok := t.specs.Lookup(queue); ok && int(dl.GetMaxDeliveryAttempts()) <= spec.DeliveryLimit {
		return fmt.Errorf("pubsub: queue %s: subscription %s: max_delivery_attempts %d is not above delivery_limit %d, so the service would dead-letter without Lily's evidence: %w; "+
			"run lily topology apply or lower delivery_limit", queue, sub, dl.GetMaxDeliveryAttempts(), spec.DeliveryLimit, transport.ErrUnsafeQueue)
	}
	t.mu.Lock()
	t.checked[sub] = true
	t.mu.Unlock()
	return nil
}

// pull pulls up to max messages from sub (return_immediately, so that a
// Receive polls both subscriptions).
func (t *Transport) pull(ctx context.Context, queue, sub string, max int) ([]*transport.Delivery, error) {
	rctx, cancel := t.rpc(ctx)
	resp, err := t.sub.Pull(rctx, &pubsubpb.PullRequest{Subscription: t.subPath(sub), MaxMessages: int32(max), ReturnImmediately: true})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		if status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("pubsub: queue %s: pull %s: %w: run lily topology apply", queue, sub, transport.ErrUnknownQueue)
		}
		return nil, fmt.Errorf("pubsub: queue %s: pull %s: %w", queue, sub, err)
	}
	now := time.Now()
	ds := make([]*transport.Delivery, 0, len(resp.ReceivedMessages))
	for _, rm := range resp.ReceivedMessages {
		ds = append(ds, t.delivery(queue, sub, rm, now))
	}
	return ds, nil
}

// delivery converts a received message.
func (t *Transport) delivery(queue, sub string, rm *pubsubpb.ReceivedMessage, now time.Time) *transport.Delivery {
	m, internal := fromPubsub(rm.Message)
	d := &transport.Delivery{Message: m, Queue: queue, DeliveryCount: int(rm.DeliveryAttempt),
		MessageID: rm.Message.GetMessageId(), Receipt: &receipt{sub: sub, main: t.Names(queue).Subscription, ackID: rm.AckId, pulledAt: now}}
	if pt := rm.Message.GetPublishTime(); pt != nil {
		d.EnqueuedAt = pt.AsTime().UTC()
	}
	if d.DeliveryCount < 1 {
		d.DeliveryCount = 1
	}
	d.DeliveryCount += priorDeliveries(internal)
	return d
}

func receiptOf(d *transport.Delivery) (*receipt, error) {
	r, ok := d.Receipt.(*receipt)
	if !ok || r == nil {
		return nil, errors.New("pubsub: delivery was not received from the pubsub transport")
	}
	return r, nil
}

// hold records deliveries handed to consumer.
func (t *Transport) hold(consumer string, ds []*transport.Delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		r := d.Receipt.(*receipt)
		t.held[r.ackID] = &held{consumer: consumer, sub: r.sub}
	}
}

// release forgets held deliveries.
func (t *Transport) release(ds ...*transport.Delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		if r, ok := d.Receipt.(*receipt); ok {
			delete(t.held, r.ackID)
		}
	}
}

// buffer keeps pulled deliveries not handed out, for the next Receive.
func (t *Transport) buffer(queue string, ds []*transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buffered[queue] = append(t.buffered[queue], ds...)
}

// takeBuffered returns up to max buffered deliveries of queue, extending
// the ack deadline of those that waited for half of it.
func (t *Transport) takeBuffered(ctx context.Context, queue string, max int) []*transport.Delivery {
	t.mu.Lock()
	b := t.buffered[queue]
	n := min(max, len(b))
	ds := append([]*transport.Delivery(nil), b[:n]...)
	t.buffered[queue] = b[n:]
	var stale []*transport.Delivery
	now := time.Now()
	for _, d := range t.buffered[queue] {
		if r := d.Receipt.(*receipt); now.Sub(r.pulledAt) > t.o.AckDeadline/2 {
			r.pulledAt = now
			stale = append(stale, d)
		}
	}
	t.mu.Unlock()
	if len(stale) > 0 {
		t.modify(ctx, stale, int32(t.o.AckDeadline/time.Second))
	}
	return ds
}

// modify sets the ack deadline of deliveries to secs (0 = nack), grouped
// by subscription. It returns one error per delivery.
func (t *Transport) modify(ctx context.Context, ds []*transport.Delivery, secs int32) []error {
	return t.perSubscription(ds, "modify ack deadline", func(sub string, ids []string) error {
		rctx, cancel := t.rpc(ctx)
		defer cancel()
		return t.sub.ModifyAckDeadline(rctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: t.subPath(sub), AckIds: ids, AckDeadlineSeconds: secs})
	})
}

// acknowledge acks deliveries, grouped by subscription; one error per
// delivery.
func (t *Transport) acknowledge(ctx context.Context, ds []*transport.Delivery) []error {
	return t.perSubscription(ds, "acknowledge", func(sub string, ids []string) error {
		rctx, cancel := t.rpc(ctx)
		defer cancel()
		return t.sub.Acknowledge(rctx, &pubsubpb.AcknowledgeRequest{Subscription: t.subPath(sub), AckIds: ids})
	})
}

// perSubscription calls do with the ack IDs of ds, grouped by
// subscription in calls of at most 1,000 IDs (the service's limit), and
// returns one error per delivery: its receipt's, or its call's.
func (t *Transport) perSubscription(ds []*transport.Delivery, what string, do func(sub string, ids []string) error) []error {
	errs := make([]error, len(ds))
	bySub := map[string][]int{}
	for i, d := range ds {
		r, err := receiptOf(d)
		if err != nil {
			errs[i] = err
			continue
		}
		bySub[r.sub] = append(bySub[r.sub], i)
	}
	for sub, idx := range bySub {
		for start := 0; start < len(idx); start += 1000 {
			part := idx[start:min(start+1000, len(idx))]
			ids := make([]string, len(part))
			for k, i := range part {
				ids[k] = ds[i].Receipt.(*receipt).ackID
			}
			if err := do(sub, ids); err != nil {
				for _, i := range part {
					errs[i] = fmt.Errorf("pubsub: %s on %s: %w", what, sub, err)
				}
			}
		}
	}
	return errs
}

// ExtendLeases extends the ack deadlines of deliveries still held by
// p.Consumer (ModifyAckDeadline, whole seconds, at most 600). A delivery
// the transport no longer holds for the consumer is reported with
// ErrLeaseLost. The service does not say whether an ack deadline had
// already passed (without exactly-once delivery), so a lease lost to
// expiry shows only as a redelivery.
func (t *Transport) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	secs := int32(min(max((p.For+time.Second-1)/time.Second, 1), 600))
	errs := make([]error, len(p.Deliveries))
	var live []*transport.Delivery
	var at []int
	t.mu.Lock()
	for i, d := range p.Deliveries {
		r, ok := d.Receipt.(*receipt)
		if h := t.held[receiptKey(r, ok)]; !ok || h == nil || h.consumer != p.Consumer {
			errs[i] = fmt.Errorf("pubsub: event %s: %w", d.EventID, transport.ErrLeaseLost)
			continue
		}
		live = append(live, d)
		at = append(at, i)
	}
	t.mu.Unlock()
	for k, err := range t.modify(ctx, live, secs) {
		errs[at[k]] = err
	}
	return settleErr(errs)
}

func receiptKey(r *receipt, ok bool) string {
	if !ok || r == nil {
		return ""
	}
	return r.ackID
}

// RecoverLeases gives back at once (a nack: ModifyAckDeadline 0) every
// delivery handed to p.Consumer and not settled, as the service does when
// the ack deadline of a dead consumer passes. Their delivery attempts stay
// raised.
func (t *Transport) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	t.mu.Lock()
	var ds []*transport.Delivery
	for ackID, h := range t.held {
		if h.consumer == p.Consumer {
			ds = append(ds, &transport.Delivery{Receipt: &receipt{sub: h.sub, ackID: ackID}})
			delete(t.held, ackID)
		}
	}
	t.mu.Unlock()
	errs := t.modify(ctx, ds, 0)
	return len(ds), errors.Join(errs...)
}

func settleErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &transport.SettleError{Errs: errs}
		}
	}
	return nil
}
