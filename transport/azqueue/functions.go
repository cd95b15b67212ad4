package azqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Functions is the poison queue of an Azure Functions queue trigger
// ([[foreign_dlq]] kind = "azure-functions"): the Functions runtime moves a
// message that failed maxDequeueCount times from the trigger queue to
// "<queue>-poison" with its text alone — no reason, no error, no count.
// DrainDeadLetters takes them into the catalog with what the service still
// tells; Publish (a redrive) sends a message's text back to the trigger
// queue, as the function reads it.
type Functions struct {
	t *Transport
	// queue is the trigger queue's Storage name; redriveTo where a redrive
	// goes (the trigger queue unless --to).
	queue, redriveTo string
	maxDequeue       int
}

var (
	_ transport.DeadLetterDrainer = (*Functions)(nil)
	_ transport.DeadLetterCounter = (*Functions)(nil)
)

// Functions returns the poison queue of the Functions trigger queue queue
// (its Storage name, as the function's binding names it), whose app moves
// a message after maxDequeueCount dequeues (host.json; 0: Functions'
// default, 5). A redrive goes to redriveTo, or to queue when empty.
func (t *Transport) Functions(queue string, maxDequeueCount int, redriveTo string) *Functions {
	if maxDequeueCount <= 0 {
		maxDequeueCount = 5
	}
	if redriveTo == "" {
		redriveTo = queue
	}
	return &Functions{t: t, queue: queue, redriveTo: redriveTo, maxDequeue: maxDequeueCount}
}

// PoisonQueue is the Storage name of the poison queue.
func (f *Functions) PoisonQueue() string { return f.queue + poisonSuffix }

// DrainDeadLetters moves the poison messages to store in batches, deleting
// each batch only after store returned nil (catalog commit, then delete).
// Each keeps its text as its body, byte for byte; its event ID is its
// Storage message ID (the runtime gives the poison copy a new one); its
// evidence is reason delivery_limit at maxDequeueCount dequeues, the trigger
// queue, the poison message's DequeueCount and its insertion time (when it
// was moved: evidence.HeaderAzureFunctions*).
func (f *Functions) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	return f.t.drain(ctx, f.PoisonQueue(), p, f.deadLetter, store)
}

// deadLetter converts a poison message.
func (f *Functions) deadLetter(m *azqueue.DequeuedMessage) *transport.Delivery {
	text := deref(m.MessageText)
	id := deref(m.MessageID)
	h := transport.Headers{
		evidence.HeaderAzureFunctionsQueue:           f.queue,
		evidence.HeaderAzureFunctionsMaxDequeueCount: strconv.Itoa(f.maxDequeue),
		evidence.HeaderAzureFunctionsMessageID:       id,
	}
	if m.DequeueCount != nil {
		h[evidence.HeaderAzureFunctionsPoisonDequeueCount] = strconv.FormatInt(*m.DequeueCount, 10)
	}
	var enq time.Time
	if m.InsertionTime != nil {
		enq = m.InsertionTime.UTC()
		h[evidence.HeaderAzureFunctionsInserted] = enq.Format(time.RFC3339Nano)
	}
	return &transport.Delivery{
		Message:       transport.Message{EventID: id, Body: []byte(text), Headers: h},
		Queue:         f.queue,
		DeliveryCount: f.maxDequeue,
		EnqueuedAt:    enq,
		MessageID:     id,
		Receipt:       &receipt{queue: f.queue, name: f.PoisonQueue(), id: id, pop: deref(m.PopReceipt), text: text},
	}
}

// DeadLetterDepth counts the poison queue's messages.
func (f *Functions) DeadLetterDepth(ctx context.Context, _ string) (int64, error) {
	return f.t.count(ctx, f.PoisonQueue(), f.PoisonQueue())
}

// Publish sends each message's body, as its text and nothing else (the
// function reads the text; the evidence stays in the catalog), to the
// trigger queue (or the redrive's --to), with the service's default
// time-to-live, as a producer of the function's queue would.
func (f *Functions) Publish(ctx context.Context, p *transport.PublishParams) error {
	for _, m := range p.Messages {
		if !utf8.Valid(m.Body) {
			return fmt.Errorf("azqueue: redrive %s to %s: the body is not text, and a Storage queue message is text: edit the entry, or discard it", m.EventID, f.redriveTo)
		}
	}
	c, err := f.t.client(f.redriveTo)
	if err != nil {
		return err
	}
	for _, m := range p.Messages {
		if _, err := c.EnqueueMessage(ctx, string(m.Body), nil); err != nil {
			if isNotFound(err) {
				return unknown("redrive to", f.redriveTo, f.redriveTo, err)
			}
			return fmt.Errorf("azqueue: redrive %s to %s: %w", m.EventID, f.redriveTo, err)
		}
	}
	return nil
}
