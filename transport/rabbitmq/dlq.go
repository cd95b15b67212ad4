package rabbitmq

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

// PeekParams are the arguments of Transport.Peek.
type PeekParams struct {
	// Queue to look into, e.g. DeadLetterQueue("orders.created").
	Queue string
	// Limit is the most messages returned; 0 means all.
	Limit int
}

// Peek returns the messages of a queue without consuming them: it gets
// them unacknowledged on a private channel and closes it, which puts them
// back in order. (Each peek raises their broker-side delivery count; Lily's
// dead-letter queues have no delivery limit, so nothing is lost.)
func (t *Transport) Peek(ctx context.Context, p *PeekParams) ([]*transport.Delivery, error) {
	ch, _, err := t.channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []*transport.Delivery
	for p.Limit <= 0 || len(out) < p.Limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ok, err := ch.Get(p.Queue, false)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: peek %s: %w", p.Queue, err)
		}
		if !ok {
			break
		}
		out = append(out, delivery(p.Queue, &d))
	}
	return out, nil
}
