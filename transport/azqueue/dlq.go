package azqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// receiveAll dequeues every visible message of the Storage queue name, up
// to limit (0: all), keeping them invisible for the transport's visibility
// timeout.
func (t *Transport) receiveAll(ctx context.Context, name string, limit int) ([]*azqueue.DequeuedMessage, error) {
	c, err := t.client(name)
	if err != nil {
		return nil, err
	}
	vis := seconds(t.opts.VisibilityTimeout)
	var out []*azqueue.DequeuedMessage
	for limit <= 0 || len(out) < limit {
		n := int32(MaxBatch)
		if limit > 0 {
			n = int32(min(MaxBatch, limit-len(out)))
		}
		r, err := c.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: &n, VisibilityTimeout: &vis})
		if err != nil {
			if isNotFound(err) {
				return out, unknown("receive from", name, name, err)
			}
			return out, fmt.Errorf("azqueue: receive from %s: %w", name, err)
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
func (t *Transport) PeekDeadLetters(ctx context.Context, queue string, limit int) ([]*transport.Delivery, error) {
	dlq := DeadLetterQueue(queue)
	ms, err := t.receiveAll(ctx, dlq, limit)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	out := make([]*transport.Delivery, 0, len(ms))
	for _, m := range ms {
		d := t.deadLetter(queue, dlq, m)
		out = append(out, d)
		if err := t.visibility(ctx, d.Receipt.(*receipt), 0); err != nil {
			errs = append(errs, fmt.Errorf("azqueue: peek %s: release: %w", dlq, err))
		}
	}
	return out, errors.Join(errs...)
}

// deadLetter converts a message of queue's DLQ (Storage name dlq). Its
// delivery count is the evidence's, not the DLQ's dequeues.
func (t *Transport) deadLetter(queue, dlq string, m *azqueue.DequeuedMessage) *transport.Delivery {
	d := t.delivery(queue, dlq, "", m)
	if n, ok := d.Headers[evidence.HeaderDeliveryCount].(int32); ok && n > 0 {
		d.DeliveryCount = int(n)
	}
	return d
}

// DrainDeadLetters moves the dead letters of p.Queue's DLQ to store in
// batches, deleting each batch only after store returned nil (catalog
// commit, then delete).
func (t *Transport) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	dlq := DeadLetterQueue(p.Queue)
	return t.drain(ctx, dlq, p, func(m *azqueue.DequeuedMessage) *transport.Delivery { return t.deadLetter(p.Queue, dlq, m) }, store)
}

// drainDeletes is how many deletions of a drained batch are in flight at
// once.
const drainDeletes = 16

// drain moves the messages of the Storage queue name to store in batches
// (each converted by conv), deleting a batch only after store returned nil.
func (t *Transport) drain(ctx context.Context, name string, p *transport.DrainParams, conv func(*azqueue.DequeuedMessage) *transport.Delivery,
	store func(context.Context, []*transport.Delivery) error) (int, error) {
	next := func(ctx context.Context, n int) ([]*transport.Delivery, error) {
		ms, err := t.receiveAll(ctx, name, n)
		ds := make([]*transport.Delivery, len(ms))
		for i, m := range ms {
			ds[i] = conv(m)
		}
		return ds, err
	}
	// A batch's deletions are requests of their own, some in flight at
	// once: one after another, a batch of 256 took longer than a lease on a
	// busy Azurite, and the last deletions found their leases gone. A lost
	// lease is not an error of the drain (transport.DrainBatches): the
	// message is back in the queue, stored already, and read again.
	ack := func(ctx context.Context, ds []*transport.Delivery) error {
		errs := transport.RunEach(len(ds), drainDeletes, func(i int) error {
			if err := t.delete(ctx, ds[i].Receipt.(*receipt)); err != nil {
				return fmt.Errorf("azqueue: drain %s: delete after store: %w (it may be stored again; ingest is idempotent)", name, err)
			}
			return nil
		})
		return transport.SettleErrorOf(errs)
	}
	return transport.DrainBatches(ctx, p, next, store, ack)
}

// count reads the approximate message count of a Storage queue: every
// message it holds, visible or not (the service counts both).
func (t *Transport) count(ctx context.Context, queue, name string) (int64, error) {
	c, err := t.client(name)
	if err != nil {
		return 0, err
	}
	out, err := c.GetProperties(ctx, nil)
	if err != nil {
		if isNotFound(err) {
			return 0, unknown("count", queue, name, err)
		}
		return 0, fmt.Errorf("azqueue: count of %s (Storage name %s): %w", queue, name, err)
	}
	if out.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int64(*out.ApproximateMessagesCount), nil
}

// InFlight counts the queue's messages neither deleted nor dead-lettered:
// visible, leased and waiting for a retry (the service's approximate
// count: exact only when the queue is quiet).
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	return t.count(ctx, queue, QueueName(queue))
}

// DeadLetterDepth counts the messages in the queue's DLQ.
func (t *Transport) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	return t.count(ctx, queue, DeadLetterQueue(queue))
}
