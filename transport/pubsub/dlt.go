package pubsub

import (
	"context"
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// The attributes the real service adds to a message its dead-letter policy
// forwards. pstest adds none of them.
const (
	AttrDLSourceSubscription        = "CloudPubSubDeadLetterSourceSubscription"
	AttrDLSourceSubscriptionProject = "CloudPubSubDeadLetterSourceSubscriptionProject"
	AttrDLSourceTopicPublishTime    = "CloudPubSubDeadLetterSourceTopicPublishTime"
	AttrDLSourceDeliveryCount       = "CloudPubSubDeadLetterSourceDeliveryCount"
)

// HeaderForwardedBy is set by DrainDeadLetters on a dead letter that has
// no Lily evidence: only Lily and the subscription's dead-letter policy
// write to Lily's dead-letter topic, so such a message was forwarded by
// the service after max_delivery_attempts (value "dead_letter_policy").
// It is not a Pub/Sub attribute; the message's attributes are kept as
// they came.
const HeaderForwardedBy = evidence.HeaderPubSubForwardedBy

// deadLetter converts a message of the dead-letter subscription.
func (t *Transport) deadLetter(queue, sub string, rm *pubsubpb.ReceivedMessage) *transport.Delivery {
	d := t.delivery(queue, sub, rm, time.Now())
	d.DeliveryCount = 0
	if d.Headers == nil {
		d.Headers = transport.Headers{}
	}
	if r, _ := d.Headers[evidence.HeaderReason].(string); r == "" {
		d.Headers[HeaderForwardedBy] = "dead_letter_policy"
		if n, err := strconv.Atoi(attrText(d.Headers[AttrDLSourceDeliveryCount])); err == nil {
			d.DeliveryCount = n
		}
	}
	return d
}

func attrText(v any) string {
	s, _ := v.(string)
	return s
}

// pullAll pulls every message of a subscription that is not outstanding,
// holding each (not acking) so that the next pull returns others, and
// stops at the first pull that brings no message it has not seen. seen is
// by message ID: pstest forwards a broker dead letter again every ~10 ms
// under the same ID, and the real service "may dead-letter more than once".
func (t *Transport) pullAll(ctx context.Context, sub string, limit int, each func(*pubsubpb.ReceivedMessage, bool) error) error {
	seen := map[string]bool{}
	for {
		rctx, cancel := t.rpc(ctx)
		resp, err := t.sub.Pull(rctx, &pubsubpb.PullRequest{Subscription: t.subPath(sub), MaxMessages: 256, ReturnImmediately: true})
		cancel()
		if err != nil {
			return err
		}
		fresh := 0
		for _, rm := range resp.ReceivedMessages {
			id := rm.GetMessage().GetMessageId()
			dup := seen[id]
			if !dup {
				fresh++
				seen[id] = true
			}
			if err := each(rm, dup); err != nil {
				return err
			}
		}
		if fresh == 0 || (limit > 0 && len(seen) >= limit) {
			return nil
		}
	}
}

// DeadLetters returns the dead letters waiting in the queue's dead-letter
// subscription without removing them (each is pulled, then given back with
// a nack; the dead-letter subscription has no dead-letter policy, so this
// costs nothing).
func (t *Transport) DeadLetters(ctx context.Context, queue string) ([]*transport.Delivery, error) {
	sub := DeadLetterTopic(t.Names(queue).Subscription)
	var out, back []*transport.Delivery
	err := t.pullAll(ctx, sub, 0, func(rm *pubsubpb.ReceivedMessage, dup bool) error {
		d := t.deadLetter(queue, sub, rm)
		back = append(back, d)
		if !dup {
			out = append(out, d)
		}
		return nil
	})
	t.modify(context.WithoutCancel(ctx), back, 0)
	return out, err
}

// DrainDeadLetters hands the dead letters of the queue's dead-letter
// subscription to store in batches and acknowledges a batch only after
// store returned nil (catalog commit, then broker ack). A message ID seen
// twice in one drain is acknowledged without being stored again; across
// drains the catalog's ingest is idempotent. Lily's own dead letters carry
// its evidence; one forwarded by the service's dead-letter policy gets
// HeaderForwardedBy and the delivery count of
// CloudPubSubDeadLetterSourceDeliveryCount (reason delivery_limit on
// ingest).
func (t *Transport) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 256
	}
	sub := DeadLetterTopic(t.Names(p.Queue).Subscription)
	total := 0
	var ds, dups []*transport.Delivery
	flush := func() error {
		if len(ds) > 0 {
			if err := store(ctx, ds); err != nil {
				return err
			}
		}
		all := append(ds, dups...)
		for _, err := range t.acknowledge(ctx, all) {
			if err != nil {
				return err
			}
		}
		total += len(ds)
		ds, dups = nil, nil
		return nil
	}
	err := t.pullAll(ctx, sub, p.Limit, func(rm *pubsubpb.ReceivedMessage, dup bool) error {
		d := t.deadLetter(p.Queue, sub, rm)
		if dup || (p.Limit > 0 && total+len(ds) >= p.Limit) {
			if dup {
				dups = append(dups, d)
			} else {
				t.modify(ctx, []*transport.Delivery{d}, 0)
			}
			return nil
		}
		ds = append(ds, d)
		if len(ds) >= batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		// What was pulled and not acked comes back after the ack deadline;
		// give it back now.
		t.modify(context.WithoutCancel(ctx), append(ds, dups...), 0)
	}
	return total, err
}

// DeadLetterDepth counts the dead letters waiting in the queue's
// dead-letter subscription (pulled and given back, see DeadLetters).
func (t *Transport) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	ds, err := t.DeadLetters(ctx, queue)
	return int64(len(ds)), err
}
