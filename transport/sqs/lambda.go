package sqs

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// LambdaDestination is an SQS queue that is the on-failure destination of
// an AWS Lambda function's asynchronous invocations ([[foreign_dlq]] kind =
// "lambda-destination"): Lambda sends it a JSON record when an event's
// retries are exhausted or the event grew too old. DrainDeadLetters takes
// them into the catalog: the original event (requestPayload) as the body,
// the record's requestContext and responseContext as evidence
// (evidence.HeaderLambda*), the invocation's request ID as the event ID.
type LambdaDestination struct {
	t     *Transport
	queue string
}

var (
	_ transport.DeadLetterDrainer = (*LambdaDestination)(nil)
	_ transport.DeadLetterCounter = (*LambdaDestination)(nil)
)

// LambdaDestination returns the on-failure destination queue queue (its
// SQS name, or a name of Options.QueueURLs).
func (t *Transport) LambdaDestination(queue string) *LambdaDestination {
	return &LambdaDestination{t: t, queue: queue}
}

// DrainDeadLetters moves the records to store in batches, deleting each
// batch only after store returned nil (catalog commit, then delete). A
// message that is not an on-failure record is handed over as it is (its
// body as the body, no evidence), so that nothing stays behind unseen.
func (l *LambdaDestination) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	url, err := l.t.queueURL(ctx, l.queue)
	if err != nil {
		return 0, err
	}
	return l.t.drain(ctx, l.queue, url, p, func(m types.Message) *transport.Delivery { return l.record(url, m) }, store)
}

// record converts one message of the destination queue.
func (l *LambdaDestination) record(url string, m types.Message) *transport.Delivery {
	body := []byte(aws.ToString(m.Body))
	d := &transport.Delivery{
		Message:       transport.Message{EventID: aws.ToString(m.MessageId), Body: body, Headers: transport.Headers{}},
		Queue:         l.queue,
		DeliveryCount: 1,
		EnqueuedAt:    sysTime(m, string(types.MessageSystemAttributeNameSentTimestamp)),
		MessageID:     aws.ToString(m.MessageId),
		Receipt:       &receipt{queue: l.queue, url: url, handle: aws.ToString(m.ReceiptHandle)},
	}
	r, ok := evidence.DecodeLambdaRecord(body)
	if !ok {
		l.t.opts.Logger.Warn("sqs: a message of a Lambda destination queue is not an on-failure record: ingested as it is", "queue", l.queue,
			"message_id", d.MessageID)
		return d
	}
	d.Body = r.Payload()
	for k, v := range r.Headers() {
		d.Headers[k] = v
	}
	if r.RequestContext.RequestID != "" {
		d.EventID = r.RequestContext.RequestID
	}
	d.DeliveryCount = max(r.RequestContext.ApproximateInvokeCount, 1)
	return d
}

// DeadLetterDepth counts the records waiting in the destination queue.
func (l *LambdaDestination) DeadLetterDepth(ctx context.Context, _ string) (int64, error) {
	v, i, d, err := l.t.counts(ctx, l.queue)
	return v + i + d, err
}
