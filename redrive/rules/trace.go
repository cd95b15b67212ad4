package rules

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/redrive"
)

// TracerName is the instrumentation scope of the rules' spans.
const TracerName = "github.com/lily-mq/lily/redrive/rules"

// Attributes of a firing's span besides catalog's lily.actor, lily.op and
// lily.outcome, and redrive.AttrJobID.
const (
	// AttrRule is the rule's name.
	AttrRule = attribute.Key("lily.rule")
	// AttrOccurrence identifies the trigger's occurrence the rule fired for.
	AttrOccurrence = attribute.Key("lily.rule.occurrence")
	// AttrTrigger says what happened, for people.
	AttrTrigger = attribute.Key("lily.rule.trigger")
)

// Outcomes of a firing's span (lily.outcome).
const (
	// OutcomeJobCreated: the rule queued a redrive job.
	OutcomeJobCreated = "job_created"
	// OutcomeNothing: the rule fired and selected nothing to redrive.
	OutcomeNothing = "nothing_selected"
	// OutcomeDeferred: the queue had an active job, or another job was
	// created first; the firing was released to be tried again.
	OutcomeDeferred = "deferred"
)

// traceFiring starts the span of one firing, "rule <name>": an automatic
// decision has no operator, so the span is in the context of the loop that
// fires the rules ('lily serve', 'lily dlq rules'). The job it
// creates runs later, under a span of its own (redrive job <queue>) with
// the same lily.redrive.job_id and lily.op.
func traceFiring(ctx context.Context, tp trace.TracerProvider, r Rule, pl *Plan, op string) (context.Context, func(bool, error)) {
	if tp == nil {
		return ctx, func(bool, error) {}
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, "rule "+r.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			AttrRule.String(r.Name),
			AttrOccurrence.String(pl.Occurrence),
			AttrTrigger.String(pl.Trigger),
			catalog.AttrDecision.String(catalog.ActionRedrive),
			catalog.AttrActor.String(r.Actor()),
			catalog.AttrOp.String(op),
			attribute.String("messaging.destination.name", r.Queue),
		))
	return ctx, func(fired bool, err error) {
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, "rule not fired")
		case !fired:
			span.SetAttributes(catalog.AttrOutcome.String(OutcomeDeferred))
		case pl.JobID != 0:
			span.SetAttributes(catalog.AttrOutcome.String(OutcomeJobCreated), redrive.AttrJobID.Int64(pl.JobID), attribute.Int("lily.redrive.selected", pl.Selected))
		default:
			span.SetAttributes(catalog.AttrOutcome.String(OutcomeNothing))
		}
		span.End()
	}
}
