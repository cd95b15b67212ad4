package lily

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TracerName is the instrumentation scope of the runtime's spans.
const TracerName = "github.com/lily-mq/lily"

// Attributes of the runtime's spans besides the messaging semantic
// conventions (messaging.system, messaging.destination.name,
// messaging.operation.*, messaging.message.id, error.type).
const (
	AttrDeliveryCount    = attribute.Key("lily.delivery_count")
	AttrRetryCount       = attribute.Key("lily.retry_count")
	AttrRedriveCount     = attribute.Key("lily.redrive_count")
	AttrOutcome          = attribute.Key("lily.outcome")
	AttrDeadLetterReason = attribute.Key("lily.dead_letter.reason")
	AttrImmediateRetries = attribute.Key("lily.immediate_retries")
	// AttrDeadLetterStore is where a dead letter's hand-off put it:
	// "catalog" (SQLite, or a copy the broker refused) or "broker" (its
	// dead-letter queue, ingested into the catalog later).
	AttrDeadLetterStore = attribute.Key("lily.dead_letter.store")
	// AttrDeadLetterRefused is why the broker refused a dead-letter copy.
	AttrDeadLetterRefused = attribute.Key("lily.dead_letter.refused")
)

// traceContext is W3C Trace Context: the traceparent and tracestate
// headers, the only propagation Lily reads and writes.
var traceContext = propagation.TraceContext{}

// HeaderCarrier adapts message headers to OpenTelemetry's propagation:
// values are read as text (evidence.Text: a string or the []byte another
// producer's client sends); other types are not trace context.
type HeaderCarrier transport.Headers

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the string value of key.
func (h HeaderCarrier) Get(key string) string {
	s, _ := evidence.Text(h[key])
	return s
}

// Set sets key to value.
func (h HeaderCarrier) Set(key, value string) { h[key] = value }

// Keys returns the header names.
func (h HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// InjectTraceContext writes the span context of ctx into h as W3C
// traceparent (and tracestate), unless h already has a traceparent or ctx
// carries no span; it returns a copy of h with them. Publish calls it for every message, so a producer that
// publishes inside a span is the parent of every handler attempt.
func InjectTraceContext(ctx context.Context, h transport.Headers) transport.Headers {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	if _, ok := h[evidence.HeaderTraceparent]; ok {
		return h
	}
	out := make(transport.Headers, len(h)+2) // a copy: the caller's map is not changed
	maps.Copy(out, h)
	traceContext.Inject(ctx, HeaderCarrier(out))
	return out
}

// ExtractTraceContext returns ctx with the remote span context of h's
// traceparent, if it has a valid one.
func ExtractTraceContext(ctx context.Context, h transport.Headers) context.Context {
	return traceContext.Extract(ctx, HeaderCarrier(h))
}

// tracer is the consumer's tracer: a no-op without a TracerProvider, so
// tracing costs nothing when it is off.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// messagingSystem is the messaging.system value of a transport.
func messagingSystem(t string) string {
	switch t {
	case "sqs":
		return "aws_sqs"
	case "pubsub":
		return "gcp_pubsub"
	case "azqueue":
		return "azure_storage_queue"
	case "":
		return TransportSQLite
	}
	return t
}

// startAttempt starts the span of one handler attempt of t's delivery, a
// child of the producer's context (its traceparent), and makes it t's
// (ticket.span); n are the delivery's counts. A message without a
// traceparent gets this span's, so that its retry copy, its dead-letter
// copy and a redrive of it stay in the same trace (copies keep every
// header).
func (c *Consumer) startAttempt(ctx context.Context, t *ticket, n counts) context.Context {
	if !c.tracing {
		return ctx
	}
	q, d := c.o.Queue, t.d
	ctx = ExtractTraceContext(ctx, d.Headers)
	ctx, span := c.tracer.Start(ctx, "process "+q.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", messagingSystem(q.Transport)),
			attribute.String("messaging.destination.name", q.Name),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.message.id", d.EventID),
			attribute.Int("messaging.message.body.size", len(d.Body)),
			AttrDeliveryCount.Int(d.DeliveryCount),
			AttrRetryCount.Int(n.retry),
			AttrRedriveCount.Int(n.redrive),
		))
	if _, ok := d.Headers[evidence.HeaderTraceparent]; !ok {
		d.Headers = InjectTraceContext(ctx, d.Headers)
	}
	t.span = span
	return ctx
}

// endAttempt ends the span of r's ticket, if it has one, once r — the
// decision that settles it — is confirmed or not: err is the hand-off's
// error (nil: confirmed). The span leaves the ticket, so it is ended once.
func endAttempt(r settleReq, err error) {
	if r.t == nil || r.t.span == nil {
		return
	}
	span := r.t.span
	r.t.span = nil
	outcome := string(r.ev.Kind)
	if err != nil {
		outcome = string(EventSettleFailed)
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	if r.ev.Reason != "" {
		span.SetAttributes(AttrDeadLetterReason.String(r.ev.Reason))
	}
	switch {
	case err != nil:
		span.SetAttributes(attribute.String("error.type", "settle_failed"))
		span.RecordError(err)
		span.SetStatus(codes.Error, "settlement not confirmed: "+err.Error())
	case r.ev.Err != nil:
		span.SetAttributes(attribute.String("error.type", errorType(r.ev.Err)))
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// startHandOffs starts the span of each traced dead letter's hand-off in
// batch, "dead-letter <queue>", a child of its attempt's span; nil when
// none is traced. On SQLite the hand-off is the catalog write: the
// transport inserts the entry in the settlement's transaction. On a
// broker it is the dead-letter copy's publish (the catalog write is the
// ingest's span, catalog.Store.WithTracerProvider), or the catalog write
// when the broker refuses the copy (lily.dead_letter.store = catalog).
func (c *Consumer) startHandOffs(batch []settleReq) []trace.Span {
	if !c.tracing {
		return nil
	}
	var spans []trace.Span
	q := c.o.Queue
	system := messagingSystem(q.Transport)
	for i, r := range batch {
		if r.t == nil || r.t.span == nil || r.s.Action != transport.DeadLetter || r.ev.Kind != EventDeadLettered {
			continue
		}
		if spans == nil {
			spans = make([]trace.Span, len(batch))
		}
		attrs := []attribute.KeyValue{
			attribute.String("messaging.system", system),
			attribute.String("messaging.destination.name", q.Name),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "dead_letter"),
			attribute.String("messaging.message.id", r.s.Delivery.EventID),
			AttrDeadLetterReason.String(r.s.Reason),
		}
		if system == TransportSQLite {
			attrs = append(attrs, attribute.String("db.system.name", "sqlite"),
				attribute.String("db.collection.name", "lily_dlq_entries"), attribute.String("db.operation.name", "INSERT"))
		}
		_, spans[i] = c.tracer.Start(trace.ContextWithSpan(context.Background(), r.t.span), "dead-letter "+q.Name,
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	}
	return spans
}

// endHandOffs ends the spans of startHandOffs with the batch's results:
// errs by position, refused the dead letters the broker refused and the
// catalog stored.
func (c *Consumer) endHandOffs(spans []trace.Span, errs []error, refused map[int]string) {
	store := "broker"
	if messagingSystem(c.o.Queue.Transport) == TransportSQLite {
		store = "catalog"
	}
	for i, s := range spans {
		if s == nil {
			continue
		}
		if why, ok := refused[i]; ok {
			s.SetAttributes(AttrDeadLetterStore.String("catalog"), AttrDeadLetterRefused.String(why))
		} else if errs[i] == nil {
			s.SetAttributes(AttrDeadLetterStore.String(store))
		}
		if errs[i] != nil {
			s.SetAttributes(attribute.String("error.type", "settle_failed"))
			s.RecordError(errs[i])
			s.SetStatus(codes.Error, "dead letter not handed off")
		}
		s.End()
	}
}

// errorType is the error.type of a handler error: Lily's own failure
// kinds by name, a permanent error as "permanent", else the Go type of
// the innermost error — low-cardinality, never the message (which may
// carry personal data; the evidence keeps it redacted).
func errorType(err error) string {
	var te *TimeoutError
	var pe *PanicError
	switch {
	case errors.As(err, &te):
		return "timeout"
	case errors.As(err, &pe):
		return "panic"
	case isCrash(err):
		return "crash"
	case errors.As(err, new(*PermanentError)):
		return "permanent"
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}
