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

// Attributes of a job's span ("redrive job <queue>") and of an unpark's
// ("unpark <queue>"), besides catalog's lily.actor, lily.op, lily.outcome.
const (
	// AttrJobID is the redrive job's ID.
	AttrJobID = attribute.Key("lily.redrive.job_id")
	// AttrJobSent and AttrJobRefused are the job's counts as it ended:
	// sent, and refused at max_redrives (needs_manual).
	AttrJobSent    = attribute.Key("lily.redrive.sent")
	AttrJobRefused = attribute.Key("lily.redrive.refused")
	// AttrKey is the held key an unpark releases.
	AttrKey = attribute.Key("lily.ordering.key")
)

// traceJob starts the span of one run of job j, "redrive job <queue>", in
// ctx (the runner's, the API request's): the span its messages' redrive
// spans link to (traceRedrive), so that a tracing tool shows a job as one
// operation with every message it sent. A job resumed after its runner
// died is a second span with the same lily.redrive.job_id. The returned
// function ends it with the job as the run left it. Without a
// TracerProvider it does nothing.
func (rd *Redriver) traceJob(ctx context.Context, j *Job) (context.Context, func(*Job, error)) {
	if rd.TracerProvider == nil {
		return ctx, func(*Job, error) {}
	}
	ctx, span := rd.TracerProvider.Tracer(TracerName).Start(ctx, "redrive job "+j.Queue, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			AttrJobID.Int64(j.ID),
			catalog.AttrDecision.String(catalog.ActionRedrive),
			catalog.AttrActor.String(j.Actor),
			catalog.AttrOp.String(j.Op),
			attribute.String("messaging.destination.name", j.Queue),
		))
	return ctx, func(out *Job, err error) {
		if out != nil {
			span.SetAttributes(catalog.AttrOutcome.String(string(out.State)), AttrJobSent.Int(out.Sent), AttrJobRefused.Int(out.Refused))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "redrive job did not finish")
		}
		span.End()
	}
}

// unparkSpan is the span of one Unpark; its zero value (not traced) does
// nothing.
type unparkSpan struct{ span trace.Span }

// traceUnpark starts the span of an unpark, "unpark <queue>", in ctx (the
// operator's command or API request).
func (ks *Keys) traceUnpark(ctx context.Context, d decision, p UnparkParams) (context.Context, unparkSpan) {
	tp := ks.rd.TracerProvider
	if tp == nil {
		return ctx, unparkSpan{}
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, ActionUnpark+" "+p.Queue, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			catalog.AttrDecision.String(ActionUnpark),
			catalog.AttrActor.String(d.Actor),
			catalog.AttrOp.String(d.Op),
			catalog.AttrDryRun.Bool(p.DryRun),
			AttrKey.String(p.Key),
			attribute.String("messaging.destination.name", p.Queue),
		))
	return ctx, unparkSpan{span}
}

// linkHead links the unpark's span to the trace of the key's head, read
// from the traceparent stored with its entry (a head not ingested yet has
// none to read).
func (ks *Keys) linkHead(ctx context.Context, sp unparkSpan, k *HeldKey) {
	if sp.span == nil || k.Head == nil {
		return
	}
	sp.span.SetAttributes(attribute.String("messaging.message.id", k.HeadEventID), catalog.AttrEntryID.Int64(k.Head.ID))
	e, err := ks.store.Get(ctx, k.Head.ID)
	if err != nil {
		return // the decision reads it again and reports the error
	}
	if sc := trace.SpanContextFromContext(catalog.MessageTraceContext(context.Background(), e.Headers)); sc.IsValid() {
		sp.span.AddLink(trace.Link{SpanContext: sc})
	}
}

// end ends the span with what the unpark did.
func (sp unparkSpan) end(res UnparkResult, err error) {
	if sp.span == nil {
		return
	}
	if res.Action != "" {
		sp.span.SetAttributes(catalog.AttrOutcome.String(res.Action))
	}
	if err != nil {
		sp.span.RecordError(err)
		sp.span.SetStatus(codes.Error, "unpark failed")
	}
	sp.span.End()
}

// traceCancel starts the span of an operator's cancellation of job id,
// "cancel redrive job" (the job's queue is known once it is read), in ctx.
func (rd *Redriver) traceCancel(ctx context.Context, id int64, actor string) (context.Context, func(*Job, error)) {
	if rd.TracerProvider == nil {
		return ctx, func(*Job, error) {}
	}
	ctx, span := rd.TracerProvider.Tracer(TracerName).Start(ctx, "cancel redrive job", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrJobID.Int64(id), catalog.AttrDecision.String("cancel"), catalog.AttrActor.String(actor)))
	return ctx, func(j *Job, err error) {
		if j != nil {
			span.SetName("cancel redrive job " + j.Queue)
			span.SetAttributes(catalog.AttrOp.String(j.Op), attribute.String("messaging.destination.name", j.Queue),
				AttrJobSent.Int(j.Sent), AttrJobRefused.Int(j.Refused))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "not cancelled")
		} else {
			span.SetAttributes(catalog.AttrOutcome.String(catalog.OutcomeStopped))
		}
		span.End()
	}
}
