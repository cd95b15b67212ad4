package pubsub

import (
	"context"
	"fmt"
	"strconv"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/lily-mq/lily/transport"
)

// Resource is one topic with its subscription in a queue's plan.
type Resource struct {
	// Queue is the Lily queue.
	Queue string `json:"queue"`
	// Role is "main", "dlt", "retry-return" or "delay".
	Role string `json:"role"`
	// Topic and Subscription are resource IDs.
	Topic        string `json:"topic"`
	Subscription string `json:"subscription"`
	// DeadLetterTopic and MaxDeliveryAttempts are the subscription's
	// dead-letter policy ("" and 0: none).
	DeadLetterTopic     string `json:"dead_letter_topic,omitempty"`
	MaxDeliveryAttempts int    `json:"max_delivery_attempts,omitempty"`
	// AckDeadlineSeconds is the subscription's ack deadline.
	AckDeadlineSeconds int `json:"ack_deadline_seconds"`
}

// MaxAttemptsFor returns the max_delivery_attempts Lily sets for a queue
// with deliveryLimit: the configured value, else delivery_limit + 2 (Lily
// dead-letters the delivery after delivery_limit, the broker the one after
// max_delivery_attempts), at least 5, Pub/Sub's minimum.
func (t *Transport) MaxAttemptsFor(deliveryLimit int) (int, error) {
	return maxAttempts(t.o, deliveryLimit)
}

func maxAttempts(o Options, deliveryLimit int) (int, error) {
	n := o.MaxDeliveryAttempts
	if n == 0 {
		n = max(deliveryLimit+2, 5)
	}
	if n > 100 || n <= deliveryLimit {
		return 0, fmt.Errorf("pubsub: max_delivery_attempts %d must be above delivery_limit %d and at most 100 (Pub/Sub's maximum): lower delivery_limit below 99 or raise pubsub_max_delivery_attempts", n, deliveryLimit)
	}
	return n, nil
}

// Plan returns the topics and subscriptions of a queue: the main topic and
// subscription (dead-letter policy to Lily's dead-letter topic), the
// dead-letter topic with its own subscription (a dead-letter topic without
// a subscription drops what is forwarded to it), the retry-return topic and
// subscription (same dead-letter policy; also with no retries: it takes
// the redeliveries a consumer gives back) and one delay topic and
// subscription per retry bucket (no dead-letter policy: holding a copy
// there costs no delivery attempt).
func (t *Transport) Plan(q transport.QueueSpec) ([]Resource, error) { return PlanFor(t.o, q) }

// PlanFor is Plan without a connection, for options o ('lily topology
// plan').
func PlanFor(o Options, q transport.QueueSpec) ([]Resource, error) {
	o = o.WithDefaults()
	n := o.names(q.Name)
	attempts, err := maxAttempts(o, q.DeliveryLimit)
	if err != nil {
		return nil, fmt.Errorf("queue %s: %w", q.Name, err)
	}
	ack := int(o.AckDeadline.Seconds())
	dlt := DeadLetterTopic(n.Subscription)
	out := []Resource{
		{Queue: q.Name, Role: "main", Topic: n.Topic, Subscription: n.Subscription, DeadLetterTopic: dlt, MaxDeliveryAttempts: attempts, AckDeadlineSeconds: ack},
		{Queue: q.Name, Role: "dlt", Topic: dlt, Subscription: dlt, AckDeadlineSeconds: ack},
	}
	// The retry-return topic takes due retry copies and, without retries
	// too, the redeliveries a consumer gives back (giveback.go).
	ret := ReturnTopic(n.Subscription)
	out = append(out, Resource{Queue: q.Name, Role: "retry-return", Topic: ret, Subscription: ret, DeadLetterTopic: dlt, MaxDeliveryAttempts: attempts, AckDeadlineSeconds: ack})
	for _, ms := range q.BucketsMillis {
		d := DelayTopic(n.Subscription, ms)
		out = append(out, Resource{Queue: q.Name, Role: "delay", Topic: d, Subscription: d, AckDeadlineSeconds: ack})
	}
	for _, r := range out {
		for _, id := range []string{r.Topic, r.Subscription} {
			if err := checkID(id); err != nil {
				return nil, fmt.Errorf("pubsub: queue %s: resource ID %q: %w: choose shorter or plainer queue, topic or subscription names", q.Name, id, err)
			}
		}
	}
	return out, nil
}

// Register remembers queue specs (retry buckets, delivery limit) without
// declaring anything, for consumers of a topology declared elsewhere.
func (t *Transport) Register(specs ...transport.QueueSpec) { t.specs.Register(specs...) }

// Declare creates every planned topic and subscription that does not exist
// (dead-letter topics and their subscriptions first, since a dead-letter
// policy names an existing topic), and sets the dead-letter policy and ack
// deadline of a main or retry-return subscription that exists without
// them. Idempotent. On the real service the Pub/Sub service agent also
// needs the publisher role on the dead-letter topic and the subscriber
// role on the subscription, which Declare does not grant.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	for _, q := range p.Queues {
		plan, err := t.Plan(q)
		if err != nil {
			return err
		}
		// dlt first, main last.
		order := append(plan[1:], plan[0])
		for _, r := range order {
			if err := t.createTopic(ctx, r.Topic); err != nil {
				return err
			}
		}
		for _, r := range order {
			if err := t.ensureSubscription(ctx, r); err != nil {
				return err
			}
		}
		t.specs.Register(q)
		t.mu.Lock()
		delete(t.checked, plan[0].Subscription)
		t.mu.Unlock()
	}
	return nil
}

func (t *Transport) createTopic(ctx context.Context, id string) error {
	rctx, cancel := t.rpc(ctx)
	defer cancel()
	_, err := t.pub.CreateTopic(rctx, &pubsubpb.Topic{Name: t.topicPath(id)})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("pubsub: create topic %s: %w", id, err)
	}
	return nil
}

func (t *Transport) subscription(r Resource) *pubsubpb.Subscription {
	s := &pubsubpb.Subscription{Name: t.subPath(r.Subscription), Topic: t.topicPath(r.Topic),
		AckDeadlineSeconds: int32(r.AckDeadlineSeconds), MessageRetentionDuration: durationpb.New(7 * 24 * 3600 * 1e9)}
	if r.DeadLetterTopic != "" {
		s.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: t.topicPath(r.DeadLetterTopic), MaxDeliveryAttempts: int32(r.MaxDeliveryAttempts)}
	}
	return s
}

func (t *Transport) ensureSubscription(ctx context.Context, r Resource) error {
	want := t.subscription(r)
	rctx, cancel := t.rpc(ctx)
	defer cancel()
	_, err := t.sub.CreateSubscription(rctx, want)
	if err == nil {
		return nil
	}
	if status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("pubsub: create subscription %s on %s: %w", r.Subscription, r.Topic, err)
	}
	if r.DeadLetterTopic == "" {
		return nil
	}
	got, err := t.sub.GetSubscription(rctx, &pubsubpb.GetSubscriptionRequest{Subscription: want.Name})
	if err != nil {
		return fmt.Errorf("pubsub: get subscription %s: %w", r.Subscription, err)
	}
	if got.GetDeadLetterPolicy().GetDeadLetterTopic() == want.DeadLetterPolicy.DeadLetterTopic &&
		got.GetDeadLetterPolicy().GetMaxDeliveryAttempts() == want.DeadLetterPolicy.MaxDeliveryAttempts {
		return nil
	}
	_, err = t.sub.UpdateSubscription(rctx, &pubsubpb.UpdateSubscriptionRequest{Subscription: want,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"dead_letter_policy"}}})
	if err != nil {
		return fmt.Errorf("pubsub: set the dead-letter policy of subscription %s: %w", r.Subscription, err)
	}
	return nil
}

// Difference is one way the service differs from a queue's plan.
type Difference struct {
	Queue        string `json:"queue"`
	Role         string `json:"role"`
	Subscription string `json:"subscription,omitempty"`
	Topic        string `json:"topic,omitempty"`
	// Kind is "missing-topic", "missing-subscription", "topic" (the
	// subscription reads another topic) or "dead-letter-policy".
	Kind string `json:"kind"`
	Want string `json:"want,omitempty"`
	Got  string `json:"got,omitempty"`
	Fix  string `json:"fix"`
}

// String describes the difference on one line.
func (d Difference) String() string {
	switch d.Kind {
	case "missing-topic":
		return fmt.Sprintf("pubsub topic %s (%s of %s): missing; %s", d.Topic, d.Role, d.Queue, d.Fix)
	case "missing-subscription":
		return fmt.Sprintf("pubsub subscription %s (%s of %s): missing; %s", d.Subscription, d.Role, d.Queue, d.Fix)
	}
	return fmt.Sprintf("pubsub subscription %s (%s of %s): %s is %s, want %s; %s", d.Subscription, d.Role, d.Queue, d.Kind, d.Got, d.Want, d.Fix)
}

// Verify compares the queues' plans with the service: every topic and
// subscription exists, each subscription reads its topic, and the main
// and retry-return subscriptions have the planned dead-letter policy.
func (t *Transport) Verify(ctx context.Context, specs []transport.QueueSpec) ([]Difference, int, error) {
	var out []Difference
	n := 0
	const fix = "run lily topology apply"
	for _, q := range specs {
		plan, err := t.Plan(q)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range plan {
			n++
			rctx, cancel := t.rpc(ctx)
			_, err := t.pub.GetTopic(rctx, &pubsubpb.GetTopicRequest{Topic: t.topicPath(r.Topic)})
			if status.Code(err) == codes.NotFound {
				out = append(out, Difference{Queue: q.Name, Role: r.Role, Topic: r.Topic, Kind: "missing-topic", Fix: fix})
			} else if err != nil {
				cancel()
				return nil, 0, fmt.Errorf("pubsub: get topic %s: %w", r.Topic, err)
			}
			s, err := t.sub.GetSubscription(rctx, &pubsubpb.GetSubscriptionRequest{Subscription: t.subPath(r.Subscription)})
			cancel()
			if status.Code(err) == codes.NotFound {
				out = append(out, Difference{Queue: q.Name, Role: r.Role, Subscription: r.Subscription, Topic: r.Topic, Kind: "missing-subscription", Fix: fix})
				continue
			} else if err != nil {
				return nil, 0, fmt.Errorf("pubsub: get subscription %s: %w", r.Subscription, err)
			}
			if s.Topic != t.topicPath(r.Topic) {
				out = append(out, Difference{Queue: q.Name, Role: r.Role, Subscription: r.Subscription, Kind: "topic", Want: t.topicPath(r.Topic), Got: s.Topic,
					Fix: "the subscription reads another topic: delete it and run lily topology apply, or name it in pubsub_subscription"})
			}
			want, got := "", ""
			if r.DeadLetterTopic != "" {
				want = t.topicPath(r.DeadLetterTopic) + " after " + strconv.Itoa(r.MaxDeliveryAttempts)
			}
			if dl := s.GetDeadLetterPolicy(); dl.GetDeadLetterTopic() != "" {
				got = dl.GetDeadLetterTopic() + " after " + strconv.Itoa(int(dl.GetMaxDeliveryAttempts()))
			}
			if want != "" && want != got {
				if got == "" {
					got = "none"
				}
				out = append(out, Difference{Queue: q.Name, Role: r.Role, Subscription: r.Subscription, Kind: "dead-letter-policy", Want: want, Got: got, Fix: fix})
			}
		}
	}
	return out, n, nil
}

// DeleteQueue deletes the queue's planned subscriptions, then its topics,
// dead-letter topic and subscription included: what they hold is lost.
// Missing ones are skipped. For tests and for retiring a queue after its
// dead letters were ingested.
func (t *Transport) DeleteQueue(ctx context.Context, q transport.QueueSpec) error {
	plan, err := t.Plan(q)
	if err != nil {
		return err
	}
	if len(q.BucketsMillis) == 0 { // a retry-return pair left by an older spec
		ret := ReturnTopic(plan[0].Subscription)
		plan = append([]Resource{{Topic: ret, Subscription: ret}}, plan...)
	}
	// Subscriptions with a dead-letter policy first: a topic named by one
	// cannot be deleted.
	plan = append(plan[1:], plan[0])
	plan[0], plan[len(plan)-1] = plan[len(plan)-1], plan[0]
	for _, r := range plan {
		rctx, cancel := t.rpc(ctx)
		err := t.sub.DeleteSubscription(rctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: t.subPath(r.Subscription)})
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("pubsub: delete subscription %s: %w", r.Subscription, err)
		}
	}
	for _, r := range plan {
		rctx, cancel := t.rpc(ctx)
		err := t.pub.DeleteTopic(rctx, &pubsubpb.DeleteTopicRequest{Topic: t.topicPath(r.Topic)})
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("pubsub: delete topic %s: %w", r.Topic, err)
		}
	}
	return nil
}
