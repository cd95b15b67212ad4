package redrive

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TracerName is the instrumentation scope of the redrive's spans.
const TracerName = "github.com/lily-mq/lily/redrive"

// traceRedrive starts one producer span per message of a redrive batch,
// "redrive <dest>": a child of the message's own trace (its traceparent,
// from the producer that published it first) linked to the operator's or
// job's span in ctx, if any. The message's traceparent becomes the span's,
// so that the consumer's attempt after the redrive is its child, in the
// same trace as the attempts that dead-lettered it. The returned function
// ends the spans with the batch's result. Without a TracerProvider it does
// nothing.
func traceRedrive(ctx context.Context, tp trace.TracerProvider, d decision, dest string, msgs []transport.Message) func(error) {
	if tp == nil || len(msgs) == 0 {
		return func(error) {}
	}
	tracer := tp.Tracer(TracerName)
	tc := propagation.TraceContext{}
	var links []trace.Link
	if l := trace.LinkFromContext(ctx, attribute.String("lily.redrive.op", d.Op)); l.SpanContext.IsValid() {
		links = append(links, l)
	}
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		// The parent is the message's trace only: the operator's context
		// is a link, so that a redrive of many messages does not fold
		// every trace into the operator's.
		parent := catalog.MessageTraceContext(context.Background(), m.Headers)
		sctx, span := tracer.Start(parent, "redrive "+dest, trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
			trace.WithAttributes(
				attribute.String("messaging.destination.name", dest),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.message.id", m.EventID),
				attribute.String("lily.redrive.actor", d.Actor),
				attribute.String("lily.redrive.op", d.Op),
				attribute.Int("lily.redrive_count", evidence.RedriveCount(m.Headers)),
			))
		out := propagation.MapCarrier{}
		tc.Inject(sctx, out)
		for k, v := range out {
			m.Headers[k] = v
		}
		spans[i] = span
	}
	return func(err error) {
		for _, s := range spans {
			if err != nil {
				s.SetAttributes(attribute.String("lily.outcome", catalog.OutcomeFailed))
				s.RecordError(err)
				s.SetStatus(codes.Error, "redrive not confirmed")
			} else {
				s.SetAttributes(attribute.String("lily.outcome", catalog.OutcomeRedriven))
			}
			s.End()
		}
	}
}
