package azqueue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/transport"
)

// receipt is a delivery's settlement handle. Every Update Message returns
// a new pop receipt: mu orders the calls on one message and guards pop and
// text.
type receipt struct {
	queue, name, consumer, id string
	// dequeues is the service's DequeueCount at this receive.
	dequeues int64
	// base is the envelope's dequeue_base (0 for foreign text).
	base int64

	mu   sync.Mutex
	pop  string
	text string // the message's text now (Update Message sends it again)
}

// Receive polls the queue (every PollInterval, up to p.Wait) for up to
// min(p.Max, 32) messages. With IsolateRedeliveries a batch is cut before
// its first redelivery, which then comes alone; the redeliveries behind
// it are given back (giveBack) and the first deliveries kept, leased, for
// the next calls; after a redelivery the consumer receives one message at
// a time until a first delivery comes again — and so does a new consumer
// instance (its predecessor may have died holding a batch).
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	t.mu.Lock()
	kept := t.stash.Take(p)
	t.mu.Unlock()
	if len(kept) > 0 {
		return kept, nil
	}
	name := QueueName(p.Queue)
	c, err := t.client(name)
	if err != nil {
		return nil, err
	}
	n := min(max(p.Max, 1), MaxBatch)
	t.mu.Lock()
	if wary, seen := t.wary[p.Consumer]; p.IsolateRedeliveries && (wary || !seen) {
		// The service counts a dequeue for every message of a batch: after
		// a crash the dead consumer's whole batch is back, and a batch of
		// them would take every innocent one to the poison's count.
		n = 1
	}
	t.mu.Unlock()
	deadline := time.Now().Add(p.Wait)
	vis := seconds(t.opts.VisibilityTimeout)
	var ms []*azqueue.DequeuedMessage
	for {
		if ctx.Err() != nil {
			return nil, nil
		}
		// A Get Messages cancelled in flight may have taken messages whose
		// answer is then lost: they would come back only after their
		// visibility timeout, their dequeue count raised. So the call is
		// not cancelled with ctx.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		n32 := int32(n)
		out, err := c.DequeueMessages(rctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: &n32, VisibilityTimeout: &vis})
		cancel()
		if err != nil {
			if isNotFound(err) {
				return nil, unknown("receive from", p.Queue, name, err)
			}
			return nil, fmt.Errorf("azqueue: receive from %s (Storage name %s): %w", p.Queue, name, err)
		}
		if ms = out.Messages; len(ms) > 0 {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(min(left, t.opts.PollInterval)):
		}
	}
	ds := make([]*transport.Delivery, 0, len(ms))
	for _, m := range ms {
		ds = append(ds, t.delivery(p.Queue, name, p.Consumer, m))
	}
	t.mu.Lock()
	h := t.held[p.Consumer]
	if h == nil {
		h = map[*receipt]bool{}
		t.held[p.Consumer] = h
	}
	for _, d := range ds {
		h[d.Receipt.(*receipt)] = true
	}
	if !p.IsolateRedeliveries {
		t.mu.Unlock()
		return ds, nil
	}
	cut := transport.Isolate(ds)
	t.wary[p.Consumer] = cut < len(ds) || ds[0].DeliveryCount > 1
	t.mu.Unlock()
	if cut == len(ds) {
		return ds, nil
	}
	rest := t.giveBack(ctx, ds[cut:], true)
	if len(rest) > 0 {
		t.mu.Lock()
		t.stash.Put(p.Consumer, p.Queue, rest)
		// Every fifth of the visibility timeout, until none is kept.
		t.stash.KeepLeases(&t.mu, t.opts.VisibilityTimeout/5, func() bool { return t.closed }, func(d *transport.Delivery) {
			if err := t.visibility(context.Background(), d.Receipt.(*receipt), vis); err != nil {
				t.opts.Logger.Warn("azqueue: extending the lease of a delivery kept from an isolated batch failed", "queue", d.Queue, "err", err)
			}
		})
		t.mu.Unlock()
	}
	return ds[:cut], nil
}

// delivery converts a dequeued message of queue (Storage name name).
func (t *Transport) delivery(queue, name, consumer string, m *azqueue.DequeuedMessage) *transport.Delivery {
	text := deref(m.MessageText)
	dec, err := decode(text)
	if err != nil {
		t.opts.Logger.Warn("azqueue: message with a malformed Lily envelope: handled as a foreign message", "queue", queue,
			"message_id", deref(m.MessageID), "err", err)
	}
	id := dec.EventID
	if id == "" {
		id = deref(m.MessageID)
	}
	dequeues := int64(0)
	if m.DequeueCount != nil {
		dequeues = *m.DequeueCount
	}
	base := dec.Base
	if base < 0 || base >= dequeues {
		// Lily writes the count of a dequeue that happened, so a later
		// dequeue is above it: anything else is not Lily's, and a forged
		// base must never keep a crash-type poison's count down.
		base = 0
	}
	var enq time.Time
	if m.InsertionTime != nil {
		enq = *m.InsertionTime
	}
	return &transport.Delivery{
		Message:       transport.Message{EventID: id, Key: dec.Key, Type: dec.Type, Body: dec.Body, Headers: dec.Headers},
		Queue:         queue,
		DeliveryCount: int(max(dequeues-base, 1)),
		EnqueuedAt:    enq,
		MessageID:     deref(m.MessageID),
		Receipt: &receipt{queue: queue, name: name, consumer: consumer, id: deref(m.MessageID), dequeues: dequeues, base: base,
			pop: deref(m.PopReceipt), text: text},
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
