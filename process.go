package lily

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// PanicError is a recovered handler panic: a runtime fault, handled as a
// transient failure, with the (truncated) stack in the evidence.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

// TimeoutError reports a handler that ran past handler_timeout_millis.
type TimeoutError struct {
	Timeout time.Duration
	Err     error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("handler timed out after %s: %v", e.Timeout, e.Err)
}

// Unwrap returns the handler's own error (usually context.DeadlineExceeded).
func (e *TimeoutError) Unwrap() error { return e.Err }

// settleReq is a worker's decision on its way to the settler. When done is
// set, the settler reports the settlement's outcome on it.
type settleReq struct {
	s    transport.Settlement
	ev   Event
	done chan error
}

// callResult is the outcome of one handler call.
type callResult struct {
	err       error
	stack     string
	abandoned bool
}

// process decides the fate of one delivery (DESIGN §4); probe marks the
// half-open breaker's probe.
func (c *Consumer) process(ctx context.Context, d *transport.Delivery, probe bool) settleReq {
	q := c.o.Queue
	ld := &Delivery{Message: d.Message, Queue: d.Queue, DeliveryCount: d.DeliveryCount,
		EnqueuedAt: d.EnqueuedAt, raw: d, RedriveCount: evidence.RedriveCount(d.Headers)}
	ld.SchemaVersion, _ = evidence.SchemaVersion(d.Headers)
	rc, err := evidence.RetryCount(d.Headers)
	if err != nil {
		return c.deadLetter(d, evidence.ReasonInvalidRetryCount, err, "", 0, 0)
	}
	ld.RetryCount = rc
	if d.DeliveryCount > q.Settings().DeliveryLimit {
		err := fmt.Errorf("delivered %d times, over delivery_limit %d: the message likely kills or stalls its consumer", d.DeliveryCount, q.Settings().DeliveryLimit)
		return c.deadLetter(d, evidence.ReasonDeliveryLimit, err, "", rc, 0)
	}
	var r callResult
	start := c.o.Now()
	for attempt := 0; ; attempt++ {
		r = c.call(ctx, ld)
		if r.err == nil || r.abandoned || attempt >= q.ImmediateRetries ||
			c.o.Classifier.Classify(r.err) == PermanentClass {
			break
		}
		time.Sleep(time.Duration(q.Settings().ImmediateRetryMillis) * time.Millisecond)
	}
	took := c.o.Now().Sub(start)
	switch {
	case r.abandoned:
		if c.br != nil {
			c.br.neutral(probe)
		}
		c.log.Error("handler did not return after its timeout; releasing the delivery for redelivery",
			"event_id", d.EventID, "timeout_ms", q.Settings().HandlerTimeoutMillis)
		c.observe(ctx, Event{Kind: EventFault, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err})
		return settleReq{
			s:  transport.Settlement{Delivery: d, Action: transport.Release},
			ev: Event{Kind: EventReleased, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err},
		}
	case r.err == nil:
		c.recordOutcome(true, probe)
		return settleReq{
			s:  transport.Settlement{Delivery: d, Action: transport.Ack},
			ev: Event{Kind: EventAcked, Queue: q.Name, EventID: d.EventID, HandlerDuration: took},
		}
	}
	if r.stack != "" {
		c.observe(ctx, Event{Kind: EventFault, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err})
	}
	if c.o.Classifier.Classify(r.err) == PermanentClass {
		if c.br != nil {
			c.br.neutral(probe) // the message's fault, not the dependency's
		}
		return c.deadLetter(d, evidence.ReasonPermanent, r.err, r.stack, rc, took)
	}
	if c.br != nil && c.br.current() != BreakerClosed {
		c.br.record(false, probe)
		return c.hold(d, r, rc, took)
	}
	c.recordOutcome(false, probe)
	if rc >= q.RetryAttempts {
		return c.deadLetter(d, evidence.ReasonRetriesExhausted, r.err, r.stack, rc, took)
	}
	return c.retry(d, r, rc+1, took)
}

// call runs the handler once with the queue's timeout, recovering panics.
// If the handler does not return within AbandonGrace after its context was
// cancelled, it is abandoned (its goroutine left to finish on its own).
func (c *Consumer) call(ctx context.Context, d *Delivery) callResult {
	timeout := time.Duration(c.o.Queue.Settings().HandlerTimeoutMillis) * time.Millisecond
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan callResult, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				stack := string(debug.Stack())
				done <- callResult{err: &PanicError{Value: v, Stack: stack}, stack: stack}
			}
		}()
		done <- callResult{err: c.h.Handle(hctx, d)}
	}()
	select {
	case r := <-done:
		if r.err != nil && hctx.Err() != nil && ctx.Err() == nil {
			r.err = &TimeoutError{Timeout: timeout, Err: r.err}
		}
		return r
	case <-hctx.Done():
	}
	grace := time.NewTimer(c.o.AbandonGrace)
	defer grace.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			r.err = &TimeoutError{Timeout: timeout, Err: r.err}
		}
		return r
	case <-grace.C:
		return callResult{err: &TimeoutError{Timeout: timeout, Err: context.DeadlineExceeded}, abandoned: true}
	}
}

// record builds the evidence of a failure of d.
func (c *Consumer) record(d *transport.Delivery, reason evidence.Reason, err error, stack string, rc int) evidence.Record {
	now := c.o.Now()
	prev, _ := evidence.Decode(d.Headers) // problems are in the headers themselves; the record keeps what decodes
	first := prev.FirstFailureAt
	if first.IsZero() {
		first = now
	}
	rec := evidence.Record{
		Reason:          reason,
		ErrorType:       causeType(err),
		ErrorMessage:    err.Error(),
		ErrorStack:      stack,
		Source:          c.o.Queue.Transport + "/" + d.Queue,
		SourceMessageID: d.MessageID,
		DeliveryCount:   d.DeliveryCount,
		RetryCount:      rc,
		RedriveCount:    evidence.RedriveCount(d.Headers),
		FirstFailureAt:  first,
		LastFailureAt:   now,
		Consumer:        c.o.Name,
		ConsumerVersion: c.o.Version,
		Host:            c.host,
	}
	if d.HasOffset {
		rec.SourcePartition, rec.SourceOffset = d.Partition, d.Offset
		rec.HasPartition, rec.HasOffset = true, true
	}
	if reason != "" {
		rec.DeadLetteredAt = now
	}
	c.o.Redactor.Scrub(&rec)
	return rec
}

// deadLetter settles d as a dead letter with evidence. The copy keeps the
// original headers; Lily's evidence is added beside them.
func (c *Consumer) deadLetter(d *transport.Delivery, reason evidence.Reason, err error, stack string, rc int, took time.Duration) settleReq {
	rec := c.record(d, reason, err, stack, rc)
	if reason == evidence.ReasonInvalidRetryCount {
		rec.RawRetryCount = evidence.FormatRaw(d.Headers[evidence.HeaderRetryCount])
	}
	h := transport.CloneHeaders(d.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	rec.Apply(h)
	kind := EventDeadLettered
	if reason == evidence.ReasonParked {
		kind = EventParked
		c.log.Debug("parked behind its key's head", "event_id", d.EventID, "key", d.Key)
	} else {
		c.dlLog.log(c.log, rec.DeadLetteredAt, d.EventID, string(reason), rec.ErrorMessage)
	}
	return settleReq{
		s: transport.Settlement{Delivery: d, Action: transport.DeadLetter, Headers: h, Reason: string(reason)},
		ev: Event{Kind: kind, Queue: c.o.Queue.Name, EventID: d.EventID, Reason: string(reason),
			HandlerDuration: took, Err: err},
	}
}

// retry settles d as a new copy in the delay bucket for retry n.
func (c *Consumer) retry(d *transport.Delivery, r callResult, n int, took time.Duration) settleReq {
	delay := time.Duration(c.policy.Choose(d.EventID, n)) * time.Millisecond
	rec := c.record(d, "", r.err, r.stack, n)
	h := transport.CloneHeaders(d.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	// The copy carries the failure so far (first/last failure, last error)
	// so that a later dead-lettering has the whole story.
	evidence.Record{
		FirstFailureAt: rec.FirstFailureAt, LastFailureAt: rec.LastFailureAt,
		ErrorType: rec.ErrorType, ErrorMessage: rec.ErrorMessage,
	}.Apply(h)
	evidence.SetRetryCount(h, n)
	return settleReq{
		s: transport.Settlement{Delivery: d, Action: transport.Retry, Delay: delay, Headers: h},
		ev: Event{Kind: EventRetried, Queue: c.o.Queue.Name, EventID: d.EventID, Delay: delay,
			HandlerDuration: took, Err: r.err},
	}
}

// recordOutcome feeds the circuit breaker, if any.
func (c *Consumer) recordOutcome(success, probe bool) {
	if c.br != nil {
		c.br.record(success, probe)
	}
}

// hold settles a transient failure that happened while the breaker was
// open: the message waits in a delay bucket as a new copy with its
// x-retry-count unchanged — no retry spent, and no delivery count raised
// (a release would raise it, and a long outage would then dead-letter
// healthy messages at the delivery limit). Without buckets it is released.
func (c *Consumer) hold(d *transport.Delivery, r callResult, rc int, took time.Duration) settleReq {
	ev := Event{Kind: EventHeld, Queue: c.o.Queue.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err}
	buckets := c.policy.Buckets()
	if len(buckets) == 0 {
		ev.Delay = time.Duration(c.o.Queue.Settings().BreakerCooldownMillis) * time.Millisecond
		return settleReq{s: transport.Settlement{Delivery: d, Action: transport.Release, Delay: ev.Delay}, ev: ev}
	}
	// The longest bucket within the cooldown, else the shortest.
	ms := buckets[0]
	for _, b := range buckets {
		if b <= c.o.Queue.Settings().BreakerCooldownMillis {
			ms = b
		}
	}
	ev.Delay = time.Duration(ms) * time.Millisecond
	h := transport.CloneHeaders(d.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	if rc > 0 {
		evidence.SetRetryCount(h, rc)
	}
	return settleReq{s: transport.Settlement{Delivery: d, Action: transport.Retry, Delay: ev.Delay, Headers: h}, ev: ev}
}
