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

// startAttempt starts the span of one handler attempt of d, a child of the
// producer's context (d's traceparent). A message without a traceparent
// gets this span's, so that its retry copy, its dead-letter copy and a
// redrive of it stay in the same trace (copies keep every header).
func (c *Consumer) startAttempt(ctx context.Context, d *transport.Delivery) (context.Context, trace.Span) {
	if !c.tracing {
		return ctx, nil
	}
	q := c.o.Queue
	ctx = ExtractTraceContext(ctx, d.Headers)
	rc, _ := evidence.RetryCount(d.Headers)
	ctx, span := c.tracer.Start(ctx, "process "+q.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", messagingSystem(q.Transport)),
			attribute.String("messaging.destination.name", q.Name),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.message.id", d.EventID),
			attribute.Int("messaging.message.body.size", len(d.Body)),
			AttrDeliveryCount.Int(d.DeliveryCount),
			AttrRetryCount.Int(rc),
			AttrRedriveCount.Int(evidence.RedriveCount(d.Headers)),
		))
	if _, ok := d.Headers[evidence.HeaderTraceparent]; !ok {
		d.Headers = InjectTraceContext(ctx, d.Headers)
	}
	return ctx, span
}

// endAttempt ends the span of r's attempt once its settlement is known:
// err is the hand-off's error (nil: confirmed).
func endAttempt(r settleReq, err error) {
	if r.span == nil {
		return
	}
	outcome := string(r.ev.Kind)
	if err != nil {
		outcome = string(EventSettleFailed)
	}
	r.span.SetAttributes(AttrOutcome.String(outcome))
	if r.ev.Reason != "" {
		r.span.SetAttributes(AttrDeadLetterReason.String(r.ev.Reason))
	}
	switch {
	case err != nil:
		r.span.SetAttributes(attribute.String("error.type", "settle_failed"))
		r.span.RecordError(err)
		r.span.SetStatus(codes.Error, "settlement not confirmed: "+err.Error())
	case r.ev.Err != nil:
		r.span.SetAttributes(attribute.String("error.type", errorType(r.ev.Err)))
		r.span.SetStatus(codes.Error, outcome)
	}
	r.span.End()
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
