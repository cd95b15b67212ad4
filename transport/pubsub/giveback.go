package pubsub

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// giveBack takes the redeliveries pulled beside one that is about to run
// alone off this process, and returns those it could not (they stay
// buffered, as before). Competing consumers make this necessary: when one
// dies, the service hands what it had pulled out again, attempts raised,
// and a consumer still pulling wide gets several of those redeliveries in
// one batch. Kept pulled while one of them runs alone, they die with it
// if it is the poison, counted once more each time, until they reach
// delivery_limit beside it (seen with three consumer processes: three
// innocent messages dead-lettered with the poison).
//
// A nack would raise their attempts too, so each is republished, with its
// attempts so far in AttrPriorDeliveries (less this pull, which no handler
// saw: the copy's count goes on from there, neither raised nor reset), to
// the queue's retry-return topic — read only by the queue's own
// subscription, never by other subscribers of the main topic — and the
// original is acknowledged once the copy is confirmed. Without a
// retry-return subscription (a topology from before this, until 'lily
// topology apply') nothing is given back.
func (t *Transport) giveBack(ctx context.Context, queue string, ds []*transport.Delivery) (left []*transport.Delivery) {
	if !t.hasReturn(ctx, queue) {
		return ds
	}
	var msgs []*pubsubpb.PubsubMessage
	var gone []*transport.Delivery
	for _, d := range ds {
		if d.DeliveryCount <= 1 {
			left = append(left, d)
			continue
		}
		pm, err := toPubsub(d.Message, d.Headers, map[string]string{AttrPriorDeliveries: strconv.Itoa(int(evidence.CarriedDeliveries(d.DeliveryCount)))})
		if err != nil {
			left = append(left, d)
			continue
		}
		msgs = append(msgs, pm)
		gone = append(gone, d)
	}
	if len(msgs) == 0 {
		return left
	}
	if _, err := t.publish(ctx, ReturnTopic(t.Names(queue).Subscription), msgs); err != nil {
		t.o.Logger.Warn("pubsub: could not give back the redeliveries pulled beside one that runs alone; they stay pulled and run alone later",
			"queue", queue, "count", len(gone), "err", err)
		return append(left, gone...)
	}
	// Confirmed: the copies are the messages now, and the originals must
	// be acknowledged even if the consumer is stopping (ctx cancelled). An
	// original whose ack fails comes back as a redelivery too (a
	// duplicate, same event ID).
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for i, err := range t.acknowledge(actx, gone) {
		if err != nil {
			t.o.Logger.Warn("pubsub: acknowledging a given-back redelivery failed; it may come back beside its copy (same event ID)",
				"queue", queue, "event_id", gone[i].EventID, "err", err)
		}
	}
	return left
}

// hasReturn reports whether queue has a retry-return subscription: always
// planned now, but missing in a topology declared before give-backs
// existed (checked once, then remembered).
func (t *Transport) hasReturn(ctx context.Context, queue string) bool {
	if len(t.buckets(queue)) > 0 {
		return true
	}
	sub := ReturnTopic(t.Names(queue).Subscription)
	t.mu.Lock()
	known, ok := t.returns[sub]
	t.mu.Unlock()
	if ok {
		return known
	}
	known, err := t.returnExists(ctx, sub)
	if err != nil {
		return false // ask again next time
	}
	if !known {
		t.o.Logger.Warn("pubsub: the queue has no retry-return subscription: redeliveries pulled beside a crash-type poison cannot be given back and may reach delivery_limit with it; run lily topology apply",
			"queue", queue, "subscription", sub)
	}
	t.mu.Lock()
	t.returns[sub] = known
	t.mu.Unlock()
	return known
}

// returnExists asks the service whether the retry-return subscription
// ret exists.
func (t *Transport) returnExists(ctx context.Context, ret string) (bool, error) {
	rctx, cancel := t.rpc(ctx)
	_, err := t.sub.GetSubscription(rctx, &pubsubpb.GetSubscriptionRequest{Subscription: t.subPath(ret)})
	cancel()
	switch {
	case err == nil:
		return true, nil
	case status.Code(err) == codes.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("pubsub: look up subscription %s: %w", ret, err)
}

// directTopic returns the topic through which m reaches one subscription
// alone (PublishParams.Direct): the retry-return topic of queue's
// subscription — or, for a redrive of a dead letter Pub/Sub's dead-letter
// policy forwarded (CloudPubSubDeadLetterSourceSubscription), of the
// subscription it failed in. Only Lily's retry-return subscription reads
// that topic. Without one (a topology from before, or a subscription Lily
// does not consume) the message is refused: the main topic would reach
// every subscription of it.
func (t *Transport) directTopic(ctx context.Context, queue string, redrive bool, m transport.Message) (string, error) {
	sub := t.Names(queue).Subscription
	if redrive {
		for _, f := range evidence.DecodeForeign(m.Headers) {
			if f.System != evidence.SystemPubSub || f.Source == "" {
				continue
			}
			src := f.Source
			if i := strings.LastIndex(src, "/subscriptions/"); i >= 0 {
				src = src[i+len("/subscriptions/"):]
			}
			if p := f.Raw[AttrDLSourceSubscriptionProject]; p != "" && p != t.o.Project {
				return "", fmt.Errorf("pubsub: redrive of %s to %s: it failed in subscription %s of project %s, not of %s: no topic of this project reaches it alone, and its topic would reach every subscription; redirect it to another Lily queue (lily dlq redrive --to QUEUE)",
					m.EventID, queue, src, p, t.o.Project)
			}
			sub = src
			break
		}
	}
	ret := ReturnTopic(sub)
	t.mu.Lock()
	known := t.returns[ret]
	t.mu.Unlock()
	if !known {
		ok, err := t.returnExists(ctx, ret)
		if err != nil {
			return "", err
		}
		if !ok {
			what := "redirect"
			if redrive {
				what = "redrive"
			}
			return "", fmt.Errorf("pubsub: %s of %s: subscription %s has no retry-return subscription %s, the only way to reach it alone: %w (run 'lily topology apply' for its queue, or redirect with lily dlq redrive --to QUEUE); the topic would reach every subscription of it",
				what, m.EventID, sub, ret, transport.ErrUnknownQueue)
		}
		t.mu.Lock()
		t.returns[ret] = true
		t.mu.Unlock()
	}
	return ret, nil
}
