package redrive

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/spantest"
	"github.com/lily-mq/lily/transport"
)

// msgTrace is the trace ID of the traceparent the fixtures' entries carry
// (catalogtest.EvidenceHeaders).
const msgTrace = "0af7651916cd43dd8448eb211c80319c"

// published records every message a redrive or release publishes.
type published struct {
	mu  sync.Mutex
	ids []string
}

func (p *published) Publish(_ context.Context, pp *transport.PublishParams) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range pp.Messages {
		p.ids = append(p.ids, m.EventID)
	}
	return nil
}

var spansNamed = spantest.Named

// linksTo reports whether s links to the span sc.
func linksTo(s sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	for _, l := range s.Links() {
		if l.SpanContext.SpanID() == sc.SpanID() && l.SpanContext.TraceID() == sc.TraceID() {
			return true
		}
	}
	return false
}

// TestJobSpan: a traced job run is one span, "redrive job <queue>", in the
// runner's context, with the job's ID, actor, operation and how it ended
// (state, sent, refused); every message it sends is a redrive span in the
// message's own trace, linked to the job's span. Nothing is left open, and
// every entry is redriven once.
func TestJobSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		es := []*catalog.Entry{entry("q.job", "j-1", evidence.ReasonPermanent, catalog.StatePending, "bad"),
			entry("q.job", "j-2", evidence.ReasonPermanent, catalog.StatePending, "bad"),
			entry("q.job", "j-3", evidence.ReasonPermanent, catalog.StatePending, "bad")}
		if err := s.Insert(ctx, es...); err != nil {
			t.Fatal(err)
		}
		rd := New(s)
		rd.TracerProvider = tp
		j, err := rd.CreateJob(ctx, JobSpec{Filter: catalog.Filter{Queue: "q.job"}, Actor: "alice", Op: "op-job", Holder: "runner", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		pub := &published{}
		rctx, runner := tp.Tracer("test").Start(ctx, "runner")
		out, err := rd.RunJob(rctx, j, JobRunParams{Holder: "runner", Lease: time.Minute, Batch: 2,
			Target: func(context.Context, string) (Publisher, error) { return pub, nil }})
		runner.End()
		if err != nil || out.State != JobDone || out.Sent != 3 {
			t.Fatalf("RunJob = %+v, %v; want done with 3 sent", out, err)
		}
		jobs := spansNamed(sr, "redrive job q.job")
		if len(jobs) != 1 {
			t.Fatalf("%d job spans, want 1", len(jobs))
		}
		js := jobs[0]
		if js.Parent().SpanID() != runner.SpanContext().SpanID() {
			t.Errorf("the job's span is under %s, want the runner's %s", js.Parent().SpanID(), runner.SpanContext().SpanID())
		}
		if spanAttr(js, AttrJobID).AsInt64() != j.ID || spanAttr(js, catalog.AttrOutcome).AsString() != string(JobDone) ||
			spanAttr(js, AttrJobSent).AsInt64() != 3 || spanAttr(js, AttrJobRefused).AsInt64() != 0 ||
			spanAttr(js, catalog.AttrActor).AsString() != "alice" || spanAttr(js, catalog.AttrOp).AsString() != "op-job" {
			t.Errorf("the job's span: %v", js.Attributes())
		}
		msgs := spansNamed(sr, "redrive q.job")
		if len(msgs) != 3 {
			t.Fatalf("%d message spans, want one per entry sent (3)", len(msgs))
		}
		for _, m := range msgs {
			if m.SpanContext().TraceID().String() != msgTrace || !linksTo(m, js.SpanContext()) {
				t.Errorf("%s (%s): trace %s links %v; want the message's trace %s, linked to the job's span",
					m.Name(), spanAttr(m, "messaging.message.id").AsString(), m.SpanContext().TraceID(), m.Links(), msgTrace)
			}
		}
		if open := spantest.Open(sr); len(open) > 0 {
			t.Errorf("spans left open: %v", open)
		}
		// Conservation: each entry redriven once, none left pending.
		if got := states(t, s, catalog.Filter{Queue: "q.job"}); len(got) != 3 || got["j-1"] != catalog.StateRedriven || got["j-2"] != catalog.StateRedriven || got["j-3"] != catalog.StateRedriven {
			t.Errorf("states after the job: %v", got)
		}
		if len(pub.ids) != 3 {
			t.Errorf("published %v, want the 3 entries once each", pub.ids)
		}
	})
}

// TestUnparkSpan: a traced Unpark is one span, "unpark <queue>", in the
// operator's context, linked to the head message's trace, with the key,
// the actor, the operation and what it did; the head's redrive is a span in
// the message's trace linked to it. Untraced keys make no span.
func TestUnparkSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		q := "q.unpark"
		head := entry(q, "head", evidence.ReasonPermanent, catalog.StatePending, "bad")
		if err := s.Insert(ctx, head); err != nil {
			t.Fatal(err)
		}
		if err := NewKeys(s).HoldKey(ctx, q, "k", KeyModePark, KeyHeld, "head"); err != nil {
			t.Fatal(err)
		}
		park(t, s, q, "k", "next")
		pub := &published{}
		target := func(context.Context, string) (Publisher, error) { return pub, nil }
		// Untraced: a dry run makes no span.
		if _, err := NewKeys(s).Unpark(ctx, UnparkParams{Queue: q, Key: "k", DryRun: true, Target: target, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if n := len(sr.Started()); n != 0 {
			t.Fatalf("untraced keys started %d spans", n)
		}
		octx, op := tp.Tracer("ops").Start(ctx, "operator")
		res, err := NewKeys(s).WithTracerProvider(tp).Unpark(octx, UnparkParams{Queue: q, Key: "k", Target: target, Actor: "alice", Op: "op-unpark"})
		op.End()
		if err != nil || res.Action != "redrive_head" {
			t.Fatalf("Unpark = %+v, %v; want redrive_head", res, err)
		}
		ups := spansNamed(sr, "unpark "+q)
		if len(ups) != 1 {
			t.Fatalf("%d unpark spans, want 1", len(ups))
		}
		up := ups[0]
		if up.Parent().SpanID() != op.SpanContext().SpanID() {
			t.Errorf("the unpark's span is under %s, want the operator's %s", up.Parent().SpanID(), op.SpanContext().SpanID())
		}
		if l := up.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != msgTrace {
			t.Errorf("the unpark's links %v, want one to the head message's trace %s", l, msgTrace)
		}
		if spanAttr(up, AttrKey).AsString() != "k" || spanAttr(up, catalog.AttrDecision).AsString() != ActionUnpark ||
			spanAttr(up, catalog.AttrOutcome).AsString() != "redrive_head" || spanAttr(up, catalog.AttrActor).AsString() != "alice" ||
			spanAttr(up, catalog.AttrOp).AsString() != "op-unpark" || spanAttr(up, "messaging.message.id").AsString() != "head" {
			t.Errorf("the unpark's span: %v", up.Attributes())
		}
		hs := spansNamed(sr, "redrive "+q)
		if len(hs) != 1 || hs[0].SpanContext().TraceID().String() != msgTrace || !linksTo(hs[0], up.SpanContext()) {
			t.Fatalf("the head's redrive spans %d; want one in the message's trace linked to the unpark's span", len(hs))
		}
		if open := spantest.Open(sr); len(open) > 0 {
			t.Errorf("spans left open: %v", open)
		}
		// Conservation: the head sent once, the parked entry still waits
		// for it.
		if len(pub.ids) != 1 || pub.ids[0] != "head" {
			t.Errorf("published %v, want the head alone", pub.ids)
		}
		if got := states(t, s, catalog.Filter{Queue: q}); got["head"] != catalog.StateRedriven || got["next"] != catalog.StateParked {
			t.Errorf("states after the unpark: %v", got)
		}
	})
}

// TestCancelSpan: an operator's cancellation of a job is one span in the
// operator's context with the job's ID, queue and operation; a second
// cancel fails (the job ended) and its span says so.
func TestCancelSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		if err := s.Insert(ctx, entry("q.cancel", "c-1", evidence.ReasonPermanent, catalog.StatePending, "bad")); err != nil {
			t.Fatal(err)
		}
		rd := New(s)
		rd.TracerProvider = tp
		j, err := rd.CreateJob(ctx, JobSpec{Filter: catalog.Filter{Queue: "q.cancel"}, Actor: "alice", Op: "op-cancel"})
		if err != nil {
			t.Fatal(err)
		}
		octx, op := tp.Tracer("ops").Start(ctx, "operator")
		if _, err := rd.CancelJob(octx, j.ID, "bob"); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.CancelJob(octx, j.ID, "bob"); err == nil {
			t.Fatal("a second cancel of an ended job succeeded")
		}
		op.End()
		spans := spansNamed(sr, "cancel redrive job q.cancel")
		if len(spans) != 2 {
			t.Fatalf("%d cancel spans, want 2", len(spans))
		}
		first, second := spans[0], spans[1]
		if first.Parent().SpanID() != op.SpanContext().SpanID() || spanAttr(first, AttrJobID).AsInt64() != j.ID ||
			spanAttr(first, catalog.AttrOp).AsString() != "op-cancel" || spanAttr(first, catalog.AttrActor).AsString() != "bob" ||
			spanAttr(first, catalog.AttrOutcome).AsString() != catalog.OutcomeStopped || first.Status().Code == codes.Error {
			t.Errorf("the cancel's span: %v %v", first.Attributes(), first.Status())
		}
		if second.Status().Code != codes.Error {
			t.Errorf("the refused cancel's span: status %v, want an error", second.Status())
		}
		if got := states(t, s, catalog.Filter{Queue: "q.cancel"}); got["c-1"] != catalog.StatePending {
			t.Errorf("the entry after the cancel: %v, want pending", got)
		}
	})
}

var spanAttr = spantest.Attr
