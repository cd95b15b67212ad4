package sqs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// fifoDefaultGroup is the MessageGroupId of a FIFO message without a key.
const fifoDefaultGroup = "lily-default"

// Publish sends the messages to the queue, each with SendMessage (SQS
// confirms each send). On a FIFO queue the key is the MessageGroupId and
// the event ID the MessageDeduplicationId. It returns the first error;
// messages sent before it stay sent (at-least-once).
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	url, err := t.queueURL(ctx, p.Queue)
	if err != nil {
		return err
	}
	wires := make([]wireMessage, len(p.Messages))
	for i, m := range p.Messages {
		if wires[i], err = encode(m.EventID, m.Key, m.Type, m.Body, m.Headers, nil); err != nil {
			return fmt.Errorf("sqs: publish to %s: message %d (%s): %w", p.Queue, i, m.EventID, err)
		}
		if wireSize(wires[i]) > MaxMessageSize {
			if lean, ok := transport.DropHint(m.Headers); ok { // the mark alone never refuses a message
				if wires[i], err = encode(m.EventID, m.Key, m.Type, m.Body, lean, nil); err != nil {
					return fmt.Errorf("sqs: publish to %s: message %d (%s): %w", p.Queue, i, m.EventID, err)
				}
			}
		}
	}
	return t.parallel(len(p.Messages), func(i int) error {
		m := p.Messages[i]
		dedup := m.EventID
		if p.Redrive && dedup != "" {
			// A redrive within SQS's 5-minute deduplication window
			// would be dropped silently as a duplicate of the original.
			dedup = fmt.Sprintf("%s:redrive:%v", m.EventID, m.Headers[evidence.HeaderRedriveCount])
		}
		if err := t.send(ctx, url, p.Queue, wires[i], dedup, m.Key, 0); err != nil {
			return fmt.Errorf("sqs: publish to %s: message %d (%s): %w", p.Queue, i, m.EventID, err)
		}
		return nil
	})
}

// send sends one wire message to the queue at url after delay; on a FIFO
// queue with dedup as MessageDeduplicationId.
func (t *Transport) send(ctx context.Context, url, queue string, w wireMessage, dedup, key string, delay time.Duration) error {
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(w.Body), MessageAttributes: w.Attrs}
	if IsFIFO(queue) {
		if delay > 0 {
			return fmt.Errorf("FIFO queue %s cannot delay one message (SQS has no per-message DelaySeconds on FIFO queues): set retry_attempts = 0 for it", queue)
		}
		g := key
		if g == "" {
			g = fifoDefaultGroup
		}
		in.MessageGroupId = aws.String(g)
		if dedup != "" {
			in.MessageDeduplicationId = aws.String(dedupID(dedup))
		}
	} else if delay > 0 {
		if delay > MaxDelay {
			return fmt.Errorf("delay %s on queue %s exceeds SQS's DelaySeconds limit of %s: lower the queue's retry delays (max_retry_backoff_millis ≤ 900000)", delay, queue, MaxDelay)
		}
		in.DelaySeconds = seconds(delay)
	}
	_, err := t.client.SendMessage(ctx, in)
	if err != nil && isNotFound(err) {
		t.forget(queue)
		return fmt.Errorf("%w: %s: %w", transport.ErrUnknownQueue, queue, err)
	}
	return err
}

// dedupID is an ID fit for MessageDeduplicationId (≤ 128 chars).
func dedupID(id string) string {
	if len(id) > 128 {
		return id[:128]
	}
	return id
}

// parallel runs f(0..n-1) on up to PublishConcurrency goroutines and
// returns the first error.
func (t *Transport) parallel(n int, f func(i int) error) error {
	errs := t.parallelEach(n, f)
	return errors.Join(errs...)
}

// parallelEach runs f(0..n-1) on up to PublishConcurrency goroutines and
// returns each one's error.
func (t *Transport) parallelEach(n int, f func(i int) error) []error {
	return transport.RunEach(n, t.opts.PublishConcurrency, f)
}
