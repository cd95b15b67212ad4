package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

// Declare declares the topology of docs/design.md §6 for the queues (idempotent:
// declaring what exists with the same arguments changes nothing; different
// arguments fail with the broker's PRECONDITION_FAILED, naming the
// argument) and registers their specs for hand-offs.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	top, err := Plan(p.Queues)
	if err != nil {
		return err
	}
	if err := t.Apply(ctx, top); err != nil {
		return err
	}
	t.register(p.Queues...)
	return nil
}

// Apply declares a planned topology: exchanges, queues, bindings.
func (t *Transport) Apply(ctx context.Context, top Topology) error {
	ch, _, err := t.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, e := range top.Exchanges {
		if err := ch.ExchangeDeclare(e.Name, e.Type, e.Durable, false, false, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: declare exchange %s: %w", e.Name, err)
		}
	}
	for _, q := range top.Queues {
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table(q.Arguments)); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %s: %w", q.Name, err)
		}
	}
	for _, b := range top.Bindings {
		if err := ch.QueueBind(b.Queue, b.RoutingKey, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: bind %s to %s (%s): %w", b.Queue, b.Exchange, b.RoutingKey, err)
		}
	}
	return nil
}

// ready returns the number of ready messages in a queue (see inspect).
func (t *Transport) ready(ctx context.Context, queue string) (int64, error) {
	n, _, err := t.inspect(ctx, queue)
	return n, err
}

// DeleteQueues deletes the queues of the specs (main, buckets, DLQ);
// exchanges are left, as they may be shared. For tests and teardown.
func (t *Transport) DeleteQueues(ctx context.Context, specs ...transport.QueueSpec) error {
	top, err := Plan(specs)
	if err != nil {
		return err
	}
	ch, _, err := t.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range top.Queues {
		if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
			return fmt.Errorf("rabbitmq: delete queue %s: %w", q.Name, err)
		}
	}
	return nil
}
