package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// HeaderSourceArn is the header in which a broker-moved dead letter keeps
// SQS's DeadLetterQueueSourceArn (the queue it was moved from).
const HeaderSourceArn = "x-lily-sqs-dead-letter-source-arn"

// receiveAll receives every visible message of url, up to limit (0: all),
// keeping them invisible for the transport's visibility timeout.
func (t *Transport) receiveAll(ctx context.Context, queue, url string, limit int) ([]types.Message, error) {
	var out []types.Message
	for limit <= 0 || len(out) < limit {
		n := 10
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		r, err := t.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(n), VisibilityTimeout: seconds(t.opts.VisibilityTimeout),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return out, fmt.Errorf("sqs: receive from %s: %w", queue, err)
		}
		if len(r.Messages) == 0 {
			return out, nil
		}
		out = append(out, r.Messages...)
	}
	return out, nil
}

// PeekDeadLetters returns the dead letters of queue (its "<queue>-dlq")
// without removing them: it receives them and makes them visible again.
// (Each peek raises their receive count; Lily's DLQs have no redrive
// policy, so nothing moves.)
func (t *Transport) PeekDeadLetters(ctx context.Context, queue string, limit int) ([]*transport.Delivery, error) {
	dlq := DeadLetterQueue(queue)
	url, err := t.queueURL(ctx, dlq)
	if err != nil {
		return nil, err
	}
	ms, err := t.receiveAll(ctx, dlq, url, limit)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	out := make([]*transport.Delivery, 0, len(ms))
	for _, m := range ms {
		out = append(out, t.deadLetter(queue, dlq, url, m))
		if _, err := t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			errs = append(errs, fmt.Errorf("sqs: peek %s: release: %w", dlq, err))
		}
	}
	return out, errors.Join(errs...)
}

// deadLetter converts a message of queue's DLQ. One that SQS moved itself
// (the redrive policy's maxReceiveCount; it has no Lily evidence) gets the
// evidence SQS gives: reason delivery_limit, the receive count, the
// source ARN (DeadLetterQueueSourceArn) and the source queue.
func (t *Transport) deadLetter(queue, dlq, url string, m types.Message) *transport.Delivery {
	d := t.delivery(queue, url, "", m)
	d.Queue = queue
	if _, ok := d.Headers[evidence.HeaderReason]; ok {
		return d
	}
	count := d.DeliveryCount
	if s, ok := t.specs.Lookup(queue); ok && s.DeliveryLimit > 0 {
		// SQS moved it when the receive after maxReceiveCount came.
		count = max(count, MaxReceiveCount(s.DeliveryLimit))
	}
	d.DeliveryCount = count
	d.Headers[evidence.HeaderReason] = string(evidence.ReasonDeliveryLimit)
	d.Headers[evidence.HeaderSource] = "sqs/" + queue
	d.Headers[evidence.HeaderSourceMessageID] = d.MessageID
	d.Headers[evidence.HeaderDeliveryCount] = int32(count)
	d.Headers[evidence.HeaderErrorMessage] = "moved by SQS's redrive policy after " + strconv.Itoa(count) + " receives (maxReceiveCount) without settlement"
	if arn := m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)]; arn != "" {
		d.Headers[HeaderSourceArn] = arn
	}
	return d
}

// DrainDeadLetters moves the dead letters of p.Queue's DLQ to store in
// batches, deleting each batch only after store returned nil (catalog
// commit, then delete). Broker-moved messages come with the evidence SQS
// gives (see PeekDeadLetters).
func (t *Transport) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	dlq := DeadLetterQueue(p.Queue)
	url, err := t.queueURL(ctx, dlq)
	if err != nil {
		return 0, err
	}
	return t.drain(ctx, dlq, url, p, func(m types.Message) *transport.Delivery { return t.deadLetter(p.Queue, dlq, url, m) }, store)
}

// drain moves the messages of queue (at url) to store in batches, each
// converted by conv (whose deliveries carry the message's receipt),
// deleting a batch only after store returned nil (catalog commit, then
// delete); a batch store refuses comes back after its visibility timeout.
func (t *Transport) drain(ctx context.Context, queue, url string, p *transport.DrainParams, conv func(types.Message) *transport.Delivery,
	store func(context.Context, []*transport.Delivery) error) (int, error) {
	next := func(ctx context.Context, n int) ([]*transport.Delivery, error) {
		ms, err := t.receiveAll(ctx, queue, url, n)
		if err != nil {
			return nil, err
		}
		ds := make([]*transport.Delivery, len(ms))
		for i, m := range ms {
			ds[i] = conv(m)
		}
		return ds, nil
	}
	ack := func(ctx context.Context, ds []*transport.Delivery) error {
		for _, d := range ds {
			rc := d.Receipt.(*receipt)
			if _, err := t.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(rc.url), ReceiptHandle: aws.String(rc.handle)}); err != nil {
				return fmt.Errorf("sqs: drain %s: delete after store: %w (it may be stored again; ingest is idempotent)", queue, err)
			}
		}
		return nil
	}
	return transport.DrainBatches(ctx, p, next, store, ack)
}

// counts reads the approximate message counts of a queue: visible, in
// flight (received, not deleted) and delayed.
func (t *Transport) counts(ctx context.Context, queue string) (visible, inflight, delayed int64, err error) {
	url, err := t.queueURL(ctx, queue)
	if err != nil {
		return 0, 0, 0, err
	}
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("sqs: counts of %s: %w", queue, err)
	}
	n := func(k types.QueueAttributeName) int64 {
		v, _ := strconv.ParseInt(out.Attributes[string(k)], 10, 64)
		return v
	}
	return n(types.QueueAttributeNameApproximateNumberOfMessages), n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed), nil
}

// InFlight counts the queue's messages neither deleted nor dead-lettered:
// visible + not visible + delayed (SQS's approximate counts: exact only
// when the queue is quiet).
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	v, i, d, err := t.counts(ctx, queue)
	return v + i + d, err
}

// DeadLetterDepth counts the messages in the queue's DLQ.
func (t *Transport) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	v, i, d, err := t.counts(ctx, DeadLetterQueue(queue))
	return v + i + d, err
}
