package azqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

// Publish enqueues the messages to the queue, each in the envelope with
// its own Put Message (the service confirms each), never expiring. It
// returns the errors of those that failed; messages enqueued before stay
// enqueued (at-least-once).
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	name := QueueName(p.Queue)
	texts := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		text, err := encode(m.EventID, m.Key, m.Type, m.Body, m.Headers, 0)
		if err == nil && len(text) > MaxMessageSize {
			if lean, ok := transport.DropHint(m.Headers); ok { // the mark alone never refuses a message
				text, err = encode(m.EventID, m.Key, m.Type, m.Body, lean, 0)
			}
		}
		if err != nil {
			return fmt.Errorf("azqueue: publish to %s: message %d (%s): %w", p.Queue, i, m.EventID, err)
		}
		if len(text) > MaxMessageSize {
			return fmt.Errorf("azqueue: publish to %s: message %d (%s): its envelope takes %d bytes, over the service's limit of %d: send large payloads by reference (a blob URL in the body)",
				p.Queue, i, m.EventID, len(text), MaxMessageSize)
		}
		texts[i] = text
	}
	errs := t.parallelEach(len(texts), func(i int) error {
		if err := t.enqueue(ctx, p.Queue, name, texts[i], 0); err != nil {
			return fmt.Errorf("azqueue: publish to %s: message %d (%s): %w", p.Queue, i, p.Messages[i].EventID, err)
		}
		return nil
	})
	return errors.Join(errs...)
}
