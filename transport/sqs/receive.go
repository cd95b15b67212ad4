package sqs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// receipt is a delivery's settlement handle.
type receipt struct {
	queue, url, handle, consumer string
	// types are the data types of the message's foreign attributes.
	types map[string]string
}

// Receive long-polls the queue (up to p.Wait, rounded up to whole seconds
// and capped at MaxWait) for up to min(p.Max, 10) messages. The delivery
// count is ApproximateReceiveCount. With IsolateRedeliveries a batch is
// cut before its first redelivery, which then comes alone (the rest is
// kept by the transport, still leased, for the next calls), and after a
// redelivery the consumer receives one message at a time until a first
// delivery comes again — and so does a new consumer instance (its
// predecessor may have died holding a batch).
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	t.mu.Lock()
	kept := t.stash.Take(p)
	t.mu.Unlock()
	if len(kept) > 0 {
		return kept, nil
	}
	url, err := t.queueURL(ctx, p.Queue)
	if err != nil {
		return nil, err
	}
	max := min(max(p.Max, 1), 10)
	t.mu.Lock()
	if wary, seen := t.wary[p.Consumer]; p.IsolateRedeliveries && (wary || !seen) {
		// SQS counts a receive for every message of a batch: after a
		// crash the dead consumer's whole batch is back, and a batch of
		// them would take every innocent one to the poison's count. So a
		// new consumer, and one that just saw a redelivery, receives one
		// message at a time until a first delivery comes.
		max = 1
	}
	t.mu.Unlock()
	wait := min(p.Wait, t.opts.MaxWait)
	if ctx.Err() != nil {
		return nil, nil
	}
	// A ReceiveMessage cancelled in flight may have taken messages whose
	// answer is then lost: they would come back only after their
	// visibility timeout, with their receive count raised. So the call is
	// not cancelled with ctx; it ends by itself after the wait.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+30*time.Second)
	defer cancel()
	out, err := t.client.ReceiveMessage(rctx, &awssqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: int32(max), WaitTimeSeconds: seconds(wait),
		VisibilityTimeout: seconds(t.opts.VisibilityTimeout), MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		if isNotFound(err) {
			t.forget(p.Queue)
			return nil, fmt.Errorf("sqs: receive from %s: %w: %w", p.Queue, transport.ErrUnknownQueue, err)
		}
		return nil, fmt.Errorf("sqs: receive from %s: %w", p.Queue, err)
	}
	ds := make([]*transport.Delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		ds = append(ds, t.delivery(p.Queue, url, p.Consumer, m))
	}
	t.mu.Lock()
	h := t.held[p.Consumer]
	if h == nil {
		h = map[string]*receipt{}
		t.held[p.Consumer] = h
	}
	for _, d := range ds {
		rc := d.Receipt.(*receipt)
		h[rc.handle] = rc
	}
	if !p.IsolateRedeliveries || len(ds) == 0 {
		t.mu.Unlock()
		return ds, nil
	}
	cut := transport.Isolate(ds)
	// The batch held a redelivery: it starts with one, or Isolate cut before one.
	t.wary[p.Consumer] = cut < len(ds) || ds[0].DeliveryCount > 1
	t.mu.Unlock()
	if cut == len(ds) {
		return ds, nil
	}
	rest := t.giveBack(ctx, p.Queue, url, ds[cut:])
	if len(rest) > 0 {
		t.mu.Lock()
		t.stash.Put(p.Consumer, p.Queue, rest)
		// Every fifth of the visibility timeout, until none is kept.
		t.stash.KeepLeases(&t.mu, t.opts.VisibilityTimeout/5, func() bool { return t.closed }, func(d *transport.Delivery) {
			rc := d.Receipt.(*receipt)
			if err := t.visibility(context.Background(), rc, seconds(t.opts.VisibilityTimeout)); err != nil {
				t.opts.Logger.Warn("sqs: extending the lease of a delivery kept from an isolated batch failed", "queue", rc.queue, "err", err)
			}
		})
		t.mu.Unlock()
	}
	return ds[:cut], nil
}

// delivery converts a received message.
func (t *Transport) delivery(queue, url, consumer string, m types.Message) *transport.Delivery {
	dec, err := decode(m)
	if err != nil {
		t.opts.Logger.Warn("sqs: message with a malformed Lily pack: handled as a foreign message", "queue", queue,
			"message_id", aws.ToString(m.MessageId), "err", err)
		dec = decoded{Headers: transport.Headers{}, Types: map[string]string{}, Body: []byte(aws.ToString(m.Body))}
		for name, a := range m.MessageAttributes {
			if strings.HasPrefix(aws.ToString(a.DataType), "Binary") {
				dec.Headers[name] = a.BinaryValue
			} else {
				dec.Headers[name] = aws.ToString(a.StringValue)
			}
		}
	}
	id := dec.EventID
	if id == "" {
		id = aws.ToString(m.MessageId)
	}
	key := dec.Key
	if key == "" && IsFIFO(queue) {
		if g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != fifoDefaultGroup {
			key = g
		}
	}
	count := max(sysInt(m, string(types.MessageSystemAttributeNameApproximateReceiveCount)), 1) + evidence.TakePriorDeliveries(dec.Headers)
	return &transport.Delivery{
		Message:       transport.Message{EventID: id, Key: key, Type: dec.Type, Body: dec.Body, Headers: dec.Headers},
		Queue:         queue,
		DeliveryCount: count,
		EnqueuedAt:    sysTime(m, string(types.MessageSystemAttributeNameSentTimestamp)),
		MessageID:     aws.ToString(m.MessageId),
		Receipt:       &receipt{queue: queue, url: url, handle: aws.ToString(m.ReceiptHandle), consumer: consumer, types: dec.Types},
	}
}

// Received converts a message that someone else received from queue (a
// Lambda event source's poller) into a delivery that this transport can
// settle: Retry and DeadLetter send their copy, then delete the message
// with its receipt handle; Release changes its visibility. The transport
// does not hold it (RecoverLeases and StopConsumer do not see it).
func (t *Transport) Received(ctx context.Context, queue string, m types.Message) (*transport.Delivery, error) {
	url, err := t.queueURL(ctx, queue)
	if err != nil {
		return nil, err
	}
	return t.delivery(queue, url, "", m), nil
}

// priorDeliveries removes evidence.HeaderPriorDeliveries from h and
// returns it: the receives a give-back copy carries (giveBack), an integer
// in 1..evidence.MaxPriorDeliveries, else 0. A foreign producer that sets
// it can make Lily dead-letter its message early (with evidence), never
// lose it.
func priorDeliveries(h transport.Headers) int {
	v, ok := h[evidence.HeaderPriorDeliveries]
	if !ok {
		return 0
	}
	delete(h, evidence.HeaderPriorDeliveries)
	return evidence.PriorDeliveries(v)
}
