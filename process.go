package lily

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

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

// settleReq is a worker's decision on its way to the settler, with the
// delivery's ticket, returned after the settlement. When done is set, the
// settler reports the settlement's outcome on it. logDead is the error
// message logged once a dead-lettering is confirmed (not at decision time:
// the hand-off may still fail).
type settleReq struct {
	t       *ticket
	s       transport.Settlement
	ev      Event
	done    chan error
	logDead string
}

// callResult is the outcome of one handler call.
type callResult struct {
	err        error
	stack      string
	abandoned  bool
	notStarted bool
	// earlier are the failed immediate retries before this call, for
	// the attempt history of the copy the delivery becomes.
	earlier []evidence.Attempt
}

// process decides the fate of one delivery (docs/design.md §4).
func (c *Consumer) process(ctx context.Context, t *ticket) settleReq {
	r := c.decide(ctx, t)
	r.t = t
	return r
}

// counts are a delivery's retry and redrive counts, parsed from its
// headers once per delivery for both the attempt's span and the decision.
type counts struct {
	retry    int
	retryErr error // x-retry-count is not canonical: the delivery is dead-lettered
	redrive  int
}

func countsOf(d *transport.Delivery) counts {
	rc, err := evidence.RetryCount(d.Headers)
	return counts{retry: rc, retryErr: err, redrive: evidence.RedriveCount(d.Headers)}
}

// decide decides the settlement of t's delivery. When tracing, the
// attempt's span is t's: whatever decision finally settles t — this one,
// or a release that ordering puts in its place — ends it, once, in the
// settler (endAttempt).
func (c *Consumer) decide(ctx context.Context, t *ticket) settleReq {
	n := countsOf(t.d)
	ctx = c.startAttempt(ctx, t, n)
	return c.decideIn(ctx, t.d, t.probe, n)
}

// decideIn is decide within the attempt's span.
func (c *Consumer) decideIn(ctx context.Context, d *transport.Delivery, probe uint64, n counts) settleReq {
	q := c.o.Queue
	ld := &Delivery{Message: d.Message, Queue: d.Queue, DeliveryCount: d.DeliveryCount,
		EnqueuedAt: d.EnqueuedAt, ContentID: d.ContentID, raw: d, RedriveCount: n.redrive}
	ld.SchemaVersion, _ = evidence.SchemaVersion(d.Headers)
	if n.retryErr != nil {
		return c.deadLetter(d, evidence.ReasonInvalidRetryCount, n.retryErr, "", 0, 0)
	}
	rc := n.retry
	ld.RetryCount = rc
	if ld.RedriveCount > 0 && evidence.IsDrillOf(d.Headers, d.EventID) {
		// A drill message (lily drill) is poison by construction: its first
		// copy carries a non-canonical x-retry-count and was dead-lettered
		// above, before any handler. What comes here is its redrive (the
		// count reset to 0): acked without the handler, which must never
		// see a synthetic message. Counted by the ledger as an ack. Only a
		// redriven copy whose mark names its own event ID counts: a
		// producer's message that merely carries the header runs its
		// handler as any other.
		c.log.Info("a message of lily drill came back redriven: acked without running the handler",
			"event_id", d.EventID, "drill", d.Headers[evidence.HeaderDrill])
		return settleReq{
			s:  transport.Settlement{Delivery: d, Action: transport.Ack},
			ev: Event{Kind: EventDrillAcked, Queue: q.Name, EventID: d.EventID, RetryCount: rc, DeliveryCount: d.DeliveryCount},
		}
	}
	if d.DeliveryCount > q.Settings().DeliveryLimit {
		err := fmt.Errorf("delivered %d times, over delivery_limit %d: the message likely kills or stalls its consumer", d.DeliveryCount, q.Settings().DeliveryLimit)
		return c.deadLetter(d, evidence.ReasonDeliveryLimit, err, "", rc, 0)
	}
	var r callResult
	var earlier []evidence.Attempt
	start := c.o.Now()
	for attempt := 0; ; attempt++ {
		r = c.call(ctx, ld)
		if r.err == nil || r.abandoned || r.notStarted || attempt >= q.ImmediateRetries || isCrash(r.err) ||
			c.o.Classifier.Classify(r.err) == PermanentClass || !c.sleepStopping(time.Duration(q.Settings().ImmediateRetryMillis)*time.Millisecond) {
			break
		}
		earlier = append(earlier, c.record(d, "", r.err, r.stack, rc).Attempt(evidence.OutcomeImmediateRetry))
	}
	r.earlier = earlier
	if len(earlier) > 0 {
		trace.SpanFromContext(ctx).SetAttributes(AttrImmediateRetries.Int(len(earlier)))
	}
	took := c.o.Now().Sub(start)
	switch {
	case r.notStarted:
		c.log.Error("stopping with every handler slot held by an abandoned handler; releasing a delivery no handler saw",
			"event_id", d.EventID, "abandoned", c.abandoned.Load())
		return c.releaseReq(d, r.err)
	case r.abandoned:
		// A failure of the dependency, like any transient error: counted
		// by the breaker, and held or retried through a bucket — never
		// released, which would raise the delivery count until a hanging
		// dependency dead-letters healthy messages at delivery_limit.
		c.log.Error("handler did not return after its timeout and grace; abandoned (it keeps its handler slot until it returns), the delivery handled as a transient failure",
			"event_id", d.EventID, "timeout_ms", q.Settings().HandlerTimeoutMillis, "abandoned", c.abandoned.Load())
		c.observe(ctx, Event{Kind: EventFault, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err})
	case isCrash(r.err) && !r.abandoned:
		// The handler's process died: given back like the deliveries of a
		// dead consumer, counted by the transport (delivery_limit).
		c.log.Warn("the handler's process crashed; releasing the delivery for redelivery (its delivery count is the bound)",
			"event_id", d.EventID, "delivery_count", d.DeliveryCount, "err", c.o.Redactor.Redact(r.err.Error()))
		c.observe(ctx, Event{Kind: EventFault, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err})
		c.br.neutral(probe) // the message's fault, not the dependency's
		return c.releaseReq(d, r.err)
	case r.err == nil:
		c.recordOutcome(true, probe)
		return settleReq{
			s:  transport.Settlement{Delivery: d, Action: transport.Ack},
			ev: Event{Kind: EventAcked, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, RetryCount: rc, DeliveryCount: d.DeliveryCount},
		}
	}
	if r.stack != "" {
		c.observe(ctx, Event{Kind: EventFault, Queue: q.Name, EventID: d.EventID, HandlerDuration: took, Err: r.err})
	}
	if !r.abandoned && c.o.Classifier.Classify(r.err) == PermanentClass {
		c.br.neutral(probe) // the message's fault, not the dependency's
		return c.deadLetter(d, evidence.ReasonPermanent, r.err, r.stack, rc, took, r.earlier...)
	}
	if c.br != nil && c.br.current() != BreakerClosed {
		c.br.record(false, probe)
		return c.hold(d, r, rc, took)
	}
	c.recordOutcome(false, probe)
	if rc >= q.RetryAttempts {
		return c.deadLetter(d, evidence.ReasonRetriesExhausted, r.err, r.stack, rc, took, r.earlier...)
	}
	return c.retry(d, r, rc+1, took)
}

// sleepStopping waits d between immediate retries; it returns false at
// once when the consumer is stopping (the failure then goes to the
// broker-delayed retry instead).
func (c *Consumer) sleepStopping(d time.Duration) bool {
	stop := c.stopping
	if stop == nil {
		stop = context.Background()
	}
	if stop.Err() != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop.Done():
		return false
	case <-t.C:
		return true
	}
}

// call runs the handler once with the queue's timeout, recovering panics.
// The handler runs in a handler slot (Concurrency of them). If it does not
// return within AbandonGrace after its context was cancelled, it is
// abandoned: its goroutine keeps the slot until the handler returns, so
// that a hanging dependency shrinks the consumer's capacity instead of
// growing its goroutines; with every slot held by abandoned handlers no
// handler starts, and the consumer says so (EventStalled).
func (c *Consumer) call(ctx context.Context, d *Delivery) callResult {
	if !c.acquireSlot() {
		return callResult{err: errNotStarted, notStarted: true}
	}
	timeout := time.Duration(c.o.Queue.Settings().HandlerTimeoutMillis) * time.Millisecond
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan callResult, 1)
	var state atomic.Int32 // 0 running, 1 returned, 2 abandoned
	start := time.Now()
	go func() {
		defer func() {
			<-c.slots
			if !state.CompareAndSwap(0, 1) {
				c.abandonedReturned(d.EventID)
			}
		}()
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
		c.observeCall(time.Since(start))
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
		c.observeCall(time.Since(start))
		if r.err != nil {
			r.err = &TimeoutError{Timeout: timeout, Err: r.err}
		}
		return r
	case <-grace.C:
	}
	if !state.CompareAndSwap(0, 2) {
		r := <-done // it returned just now
		c.observeCall(time.Since(start))
		if r.err != nil {
			r.err = &TimeoutError{Timeout: timeout, Err: r.err}
		}
		return r
	}
	c.observeCall(time.Since(start))
	c.handlerAbandoned(d.EventID)
	return callResult{err: &TimeoutError{Timeout: timeout, Err: context.DeadlineExceeded}, abandoned: true}
}

// acquireSlot takes a handler slot, waiting for one to be free. It gives up
// (false) only when the consumer is stopping and every slot is held by an
// abandoned handler, which may never return; slots held by running
// handlers are free again within their timeout and grace.
func (c *Consumer) acquireSlot() bool {
	select {
	case c.slots <- struct{}{}:
		return true
	default:
	}
	stop := c.stopping
	if stop == nil {
		stop = context.Background()
	}
	select {
	case c.slots <- struct{}{}:
		return true
	case <-stop.Done():
	}
	tick := time.NewTicker(max(c.o.AbandonGrace/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		if int(c.abandoned.Load()) >= c.o.Concurrency {
			return false
		}
		select {
		case c.slots <- struct{}{}:
			return true
		case <-tick.C:
		}
	}
}

// handlerAbandoned counts an abandoned handler and, when no handler slot is
// left, says so loudly.
func (c *Consumer) handlerAbandoned(eventID string) {
	n := int(c.abandoned.Add(1))
	q := c.o.Queue.Name
	c.observe(context.Background(), Event{Kind: EventAbandoned, Queue: q, EventID: eventID, Abandoned: n})
	if n >= c.o.Concurrency {
		c.log.Error("every handler slot is held by a handler abandoned past its timeout: no handler starts until one returns (a dependency hangs and the handler ignores its context)",
			"abandoned", n, "concurrency", c.o.Concurrency, "fix", "make the handler honour its context; the deliveries wait at the source meanwhile")
		c.observe(context.Background(), Event{Kind: EventStalled, Queue: q, EventID: eventID, Abandoned: n})
	}
}

// abandonedReturned counts an abandoned handler that returned at last.
func (c *Consumer) abandonedReturned(eventID string) {
	n := int(c.abandoned.Add(-1))
	c.log.Info("an abandoned handler returned; its handler slot is free again", "event_id", eventID, "abandoned", n)
	c.observe(context.Background(), Event{Kind: EventAbandoned, Queue: c.o.Queue.Name, EventID: eventID, Abandoned: n})
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
// original headers; Lily's evidence is added beside them, and to its
// attempt history the failed immediate retries earlier, then this failure.
func (c *Consumer) deadLetter(d *transport.Delivery, reason evidence.Reason, err error, stack string, rc int, took time.Duration, earlier ...evidence.Attempt) settleReq {
	rec := c.record(d, reason, err, stack, rc)
	firstFailure(&rec, earlier)
	if reason == evidence.ReasonInvalidRetryCount {
		rec.RawRetryCount = evidence.FormatRaw(d.Headers[evidence.HeaderRetryCount])
	}
	h := transport.CloneHeaders(d.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	rec.Apply(h)
	if reason != evidence.ReasonParked { // a parked message did not fail: its history goes on as it was
		addAttempts(h, earlier, rec.Attempt(evidence.OutcomeDeadLetter))
	}
	kind := EventDeadLettered
	logDead := rec.ErrorMessage
	if reason == evidence.ReasonParked {
		kind, logDead = EventParked, ""
		c.log.Debug("parking behind its key's head", "event_id", d.EventID, "key", d.Key)
	}
	return settleReq{
		s: transport.Settlement{Delivery: d, Action: transport.DeadLetter, Headers: h, Reason: string(reason)},
		ev: Event{Kind: kind, Queue: c.o.Queue.Name, EventID: d.EventID, Reason: string(reason),
			HandlerDuration: took, Err: err},
		logDead: logDead,
	}
}

// retry settles d as a new copy in the delay bucket for retry n.
func (c *Consumer) retry(d *transport.Delivery, r callResult, n int, took time.Duration) settleReq {
	delay := time.Duration(c.policy.Choose(d.EventID, n)) * time.Millisecond
	rec := c.record(d, "", r.err, r.stack, n)
	firstFailure(&rec, r.earlier)
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
	a := rec.Attempt(evidence.OutcomeRetry)
	a.RetryCount = n - 1 // the failed delivery's count, not the copy's
	addAttempts(h, r.earlier, a)
	evidence.SetRetryCount(h, n)
	return settleReq{
		s: transport.Settlement{Delivery: d, Action: transport.Retry, Delay: delay, Headers: h},
		ev: Event{Kind: EventRetried, Queue: c.o.Queue.Name, EventID: d.EventID, Delay: delay,
			HandlerDuration: took, Err: r.err},
	}
}

// recordOutcome feeds the circuit breaker, if any.
func (c *Consumer) recordOutcome(success bool, probe uint64) {
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
	addAttempts(h, r.earlier, c.record(d, "", r.err, r.stack, rc).Attempt(evidence.OutcomeHeld))
	return settleReq{s: transport.Settlement{Delivery: d, Action: transport.Retry, Delay: ev.Delay, Headers: h}, ev: ev}
}

// firstFailure moves rec's first failure back to the first failed
// immediate retry, when that came first.
func firstFailure(rec *evidence.Record, earlier []evidence.Attempt) {
	if len(earlier) > 0 && earlier[0].At.Before(rec.FirstFailureAt) {
		rec.FirstFailureAt = earlier[0].At
	}
}

// addAttempts adds the failed immediate retries earlier, then last, to
// the attempt history h carries (docs/design.md §7.9).
func addAttempts(h transport.Headers, earlier []evidence.Attempt, last evidence.Attempt) {
	for _, a := range earlier {
		evidence.AddAttempt(h, a)
	}
	evidence.AddAttempt(h, last)
}
