package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
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

// DrainDeadLetters moves the dead letters of p.Queue (its DLQ) to store in
// batches: each batch is acknowledged (removed) only after store returned
// nil, so a crash leaves at most a batch to be stored again.
func (t *Transport) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	return t.drain(ctx, DeadLetterQueue(p.Queue), p, func(d *amqp.Delivery) *transport.Delivery { return t.deadLetter(p.Queue, d) }, store)
}

// drain reads the queue dlq in batches converted by conv, hands each
// batch to store and acks it only once store returned nil.
func (t *Transport) drain(ctx context.Context, dlq string, p *transport.DrainParams, conv func(*amqp.Delivery) *transport.Delivery, store func(context.Context, []*transport.Delivery) error) (int, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 256
	}
	ch, _, err := t.channel(ctx)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	total := 0
	for p.Limit <= 0 || total < p.Limit {
		n := batch
		if p.Limit > 0 {
			n = min(n, p.Limit-total)
		}
		var ds []*transport.Delivery
		var last uint64
		for len(ds) < n {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			d, ok, err := ch.Get(dlq, false)
			if err != nil {
				return total, fmt.Errorf("rabbitmq: drain %s: %w", dlq, err)
			}
			if !ok {
				break
			}
			ds = append(ds, conv(&d))
			last = d.DeliveryTag
		}
		if len(ds) == 0 {
			return total, nil
		}
		if err := store(ctx, ds); err != nil {
			return total, err // the batch stays in the DLQ (the channel closes unacked)
		}
		if err := ch.Ack(last, true); err != nil {
			return total, fmt.Errorf("rabbitmq: drain %s: ack after store: %w (the batch may be stored again; ingest is idempotent)", dlq, err)
		}
		total += len(ds)
	}
	return total, nil
}

// deadLetter converts a message read from queue's DLQ. A dead letter the
// broker made itself at the delivery limit (no Lily evidence; x-death
// reason delivery_limit) carries no delivery count of its source — the
// x-delivery-count it shows is the DLQ's own — so its DeliveryCount is
// taken from the queue's delivery limit: the broker hands a message out
// exactly delivery_limit times (x-delivery-limit = delivery_limit − 1,
// docs/design.md §6) before it dead-letters it. Without the queue's spec (Declare
// or Register) the count stays what the DLQ shows.
func (t *Transport) deadLetter(queue string, d *amqp.Delivery) *transport.Delivery {
	dl := delivery(queue, d)
	if _, lily := dl.Headers[evidence.HeaderReason]; lily {
		return dl
	}
	if r, ok := evidence.BrokerReason(dl.Headers); !ok || r != evidence.ReasonDeliveryLimit {
		return dl
	}
	if s, err := t.spec(queue); err == nil && s.DeliveryLimit > 0 {
		dl.DeliveryCount = s.DeliveryLimit
	}
	return dl
}

// DeadLetterDepth counts the messages waiting in the queue's DLQ.
func (t *Transport) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	return t.ready(ctx, DeadLetterQueue(queue))
}
