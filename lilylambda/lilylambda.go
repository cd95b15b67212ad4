// Package lilylambda runs a Lily handler inside an AWS Lambda function
// triggered by SQS (an event source mapping with ReportBatchItemFailures):
// the same classification, retries and evidence as lily.Consumer, with the
// Lambda service as the receiver.
//
// Each record of the batch is handed to the handler through the runtime
// (lily.Consumer), so a record that exceeds delivery_limit
// (ApproximateReceiveCount, the crash-type poison that kills or times out
// the function) is dead-lettered without calling the handler, a transient
// failure is retried by a delayed copy with x-retry-count (the original is
// then deleted), a permanent one is dead-lettered to "<queue>-dlq" with
// evidence. Those records, and the acknowledged ones, are successes of the
// partial batch response, which Lambda deletes. A record whose settlement
// could not be made safely (the copy was not confirmed), or that the
// runtime released, or that was not finished before the function's
// deadline, is a batch item failure: SQS hands it out again.
//
// The queue's own redrive policy (maxReceiveCount above delivery_limit,
// 'lily topology apply') remains the backstop for a function that dies
// before it answers.
package lilylambda

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
)

// Options configure a Handler.
type Options struct {
	// Queue is the queue the function is triggered by (its name, delivery
	// limit, retry policy, classification).
	Queue lily.QueueConfig
	// Name and Version identify the function in the evidence. Name
	// defaults to "lambda"; Version to "".
	Name, Version string
	// Concurrency is how many records of a batch run at once. Defaults
	// to 1 (records in order).
	Concurrency int
	// Hooks observe the runtime's events. Defaults to none.
	Hooks []lily.Hook
	// Logger receives the runtime's log. Defaults to discarding.
	Logger *slog.Logger
	// Margin is how long before the invocation's deadline unfinished
	// records are given up (reported as batch item failures). Defaults
	// to 1s.
	Margin time.Duration
}

// Handler handles SQS event batches with a Lily handler.
type Handler struct {
	t *sqs.Transport
	h lily.Handler
	o Options
}

// New returns a handler whose copies (retries, dead letters) go through t.
func New(t *sqs.Transport, h lily.Handler, o Options) (*Handler, error) {
	if o.Queue.Name == "" {
		return nil, errors.New("lilylambda: Options.Queue.Name is empty: name the queue that triggers the function")
	}
	o.Queue.Transport = lily.TransportSQS
	o.Queue = o.Queue.WithDefaults()
	if err := o.Queue.Validate(); err != nil {
		return nil, fmt.Errorf("lilylambda: %w", err)
	}
	if o.Name == "" {
		o.Name = "lambda"
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Margin <= 0 {
		o.Margin = time.Second
	}
	return &Handler{t: t, h: h, o: o}, nil
}

// Handle processes one batch and returns the partial batch response: the
// records SQS must hand out again. Use it as the function's handler
// (lambda.Start(h.Handle)).
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	b := &batch{inner: h.t, outcome: map[string]bool{}, done: make(chan struct{})}
	want := sqs.QueueName(h.o.Queue.Name)
	for _, r := range ev.Records {
		if name := r.EventSourceARN[strings.LastIndex(r.EventSourceARN, ":")+1:]; r.EventSourceARN != "" && name != want {
			return events.SQSEventResponse{}, fmt.Errorf("lilylambda: record %s comes from %s, not from queue %s (SQS name %s) this handler is for",
				r.MessageId, r.EventSourceARN, h.o.Queue.Name, want)
		}
		d, err := h.t.Received(ctx, h.o.Queue.Name, message(r))
		if err != nil {
			return events.SQSEventResponse{}, fmt.Errorf("lilylambda: %w", err)
		}
		b.ds = append(b.ds, d)
	}
	var resp events.SQSEventResponse
	if len(b.ds) == 0 {
		return resp, nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithDeadline(runCtx, dl.Add(-h.o.Margin))
		defer c2()
	}
	c, err := lily.NewConsumer(b, h.h, lily.ConsumerOptions{Queue: h.o.Queue, Concurrency: h.o.Concurrency, Prefetch: len(b.ds),
		Name: h.o.Name, Version: h.o.Version, Instance: "lambda", Hooks: h.o.Hooks, Logger: h.o.Logger, ReceiveWait: 10 * time.Millisecond})
	if err != nil {
		return resp, fmt.Errorf("lilylambda: %w", err)
	}
	go func() {
		select {
		case <-b.done:
		case <-runCtx.Done():
		}
		cancel()
	}()
	if err := c.Run(runCtx); err != nil {
		return resp, fmt.Errorf("lilylambda: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.ds {
		if !b.outcome[d.MessageID] {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: d.MessageID})
		}
	}
	return resp, nil
}

// message converts a Lambda record to the SDK's message type.
func message(r events.SQSMessage) types.Message {
	attrs := make(map[string]types.MessageAttributeValue, len(r.MessageAttributes))
	for k, a := range r.MessageAttributes {
		attrs[k] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue,
			StringListValues: a.StringListValues, BinaryListValues: a.BinaryListValues}
	}
	return types.Message{MessageId: aws.String(r.MessageId), ReceiptHandle: aws.String(r.ReceiptHandle), Body: aws.String(r.Body),
		Attributes: r.Attributes, MessageAttributes: attrs}
}

// batch is the transport the runtime consumes one event batch from: it
// hands out the batch's records once and settles through the SQS
// transport, recording which records SQS may delete (outcome true).
type batch struct {
	inner *sqs.Transport
	ds    []*transport.Delivery

	mu      sync.Mutex
	next    int
	outcome map[string]bool // message ID -> settled for good
	settled int
	done    chan struct{}
}

var _ transport.Transport = (*batch)(nil)

func (b *batch) Publish(ctx context.Context, p *transport.PublishParams) error {
	return b.inner.Publish(ctx, p)
}

// Receive hands out the batch's records, then nothing.
func (b *batch) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	b.mu.Lock()
	n := min(max(p.Max, 1), len(b.ds)-b.next)
	out := b.ds[b.next : b.next+n]
	b.next += n
	b.mu.Unlock()
	if len(out) == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(p.Wait):
		}
	}
	return out, nil
}

// Settle applies the settlements: Ack needs nothing (Lambda deletes the
// record); Retry and DeadLetter send their copy and delete the original
// through the SQS transport; Release changes the visibility and leaves
// the record to come back. A failed settlement leaves the record to come
// back too.
func (b *batch) Settle(ctx context.Context, p *transport.SettleParams) error {
	errs := make([]error, len(p.Settlements))
	failed := false
	for i, s := range p.Settlements {
		ok := true
		switch s.Action {
		case transport.Ack:
		case transport.Retry, transport.DeadLetter:
			if err := b.inner.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{s}}); err != nil {
				errs[i], ok, failed = err, false, true
			}
		default: // Release: SQS hands it out again
			b.inner.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{s}})
			ok = false
		}
		b.record(s.Delivery.MessageID, ok, errs[i] == nil)
	}
	if failed {
		return &transport.SettleError{Errs: errs}
	}
	return nil
}

// record notes a record's outcome; final settlements count towards done.
func (b *batch) record(id string, ok, final bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outcome[id] = ok
	if final {
		b.settled++
		if b.settled == len(b.ds) {
			close(b.done)
		}
	}
}

func (b *batch) Close() error { return nil }
