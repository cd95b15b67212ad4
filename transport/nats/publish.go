package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport"
)

// Publish sends the messages to the queue's subject and returns once the
// stream confirmed each (its PubAck). A stream Lily declared has Lily's
// consumer as its only reader, so a Direct publish (a redrive) takes the
// same path; on an adopted stream a Direct publish first checks that the
// subject reaches Lily's consumer alone, and refuses, naming the other
// consumers, when it does not. A subject no stream captures is
// transport.ErrUnknownQueue.
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	b := t.QueueBinding(p.Queue)
	if _, adopted := t.opts.Queues[p.Queue]; adopted && p.Direct {
		if err := t.Foreign(b.Stream, b.Consumer, b.Subject).alone(ctx, b.Subject); err != nil {
			return fmt.Errorf("nats: publish to %s for its consumer alone: %w", p.Queue, err)
		}
	}
	msgs := make([]*natsgo.Msg, len(p.Messages))
	for i, m := range p.Messages {
		h, err := encodeHeaders(m, m.Headers)
		if err != nil {
			return err
		}
		msgs[i] = &natsgo.Msg{Subject: b.Subject, Header: h, Data: m.Body}
	}
	if err := t.publishAll(ctx, msgs); err != nil {
		return fmt.Errorf("nats: publish to %s (subject %s): %w", p.Queue, b.Subject, err)
	}
	return nil
}

// publishAll publishes msgs asynchronously and waits for every PubAck. The
// first error is returned (any subset may be stored: at-least-once).
func (t *Transport) publishAll(ctx context.Context, msgs []*natsgo.Msg) error {
	if len(msgs) == 1 {
		_, err := t.js.PublishMsg(ctx, msgs[0])
		return publishErr(err)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var first error
	for _, m := range msgs {
		f, err := t.js.PublishMsgAsync(m)
		if err != nil {
			first = publishErr(err)
			break
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if first == nil {
				first = publishErr(err)
			}
		case <-ctx.Done():
			if first == nil {
				first = ctx.Err()
			}
			return first
		}
	}
	return first
}

// publishErr names the cause of a failed publish: no stream on the
// subject is transport.ErrUnknownQueue.
func publishErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders) {
		return fmt.Errorf("%w: no stream captures the subject: %w", transport.ErrUnknownQueue, err)
	}
	return err
}

// isRefusal reports a publish the dead-letter stream refused for good: it
// is full (dlq_max_length, discard new) or the copy is over the server's
// max_payload.
func isRefusal(err error) bool {
	if errors.Is(err, natsgo.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		if apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
			return true
		}
	}
	s := err.Error()
	return strings.Contains(s, "maximum messages exceeded") || strings.Contains(s, "maximum bytes exceeded") ||
		strings.Contains(s, "message size exceeds maximum")
}
