package rules

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/spantest"
	"github.com/lily-mq/lily/redrive"
)

// TestFiringSpan: a traced firing is one span, "rule <name>", in the
// context of the loop that fires the rules, with the rule, the
// occurrence, the operation of its audit records and the job it created;
// asked again for the same occurrence, nothing fires and no span is made.
func TestFiringSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		opened, closed := testNow.Add(-30*time.Minute), testNow.Add(-10*time.Minute)
		e := entry("orders", "in-1", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused")
		e.DeadLetteredAt = opened.Add(time.Minute)
		if err := s.Insert(ctx, e); err != nil {
			t.Fatal(err)
		}
		rule := Rule{Name: "after-outage", Queue: "orders", When: TriggerBreakerClosed, Reason: "retries_exhausted", MaxAge: 24 * time.Hour}
		now := func() time.Time { return testNow }
		rec := NewRuntimeRecorder(s, RecorderParams{Consumer: "w1", Now: func() time.Time { return opened }})
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerOpen})
		rec.p.Now = func() time.Time { return closed }
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerClosed})

		lctx, loop := tp.Tracer("test").Start(ctx, "rule loop")
		var fired []Plan
		for range 2 { // the second pass finds the occurrence fired
			f, err := New(s).Fire(lctx, FireParams{Rules: []Rule{rule}, Now: now, TracerProvider: tp})
			if err != nil {
				t.Fatal(err)
			}
			fired = append(fired, f...)
		}
		loop.End()
		if len(fired) != 1 || fired[0].JobID == 0 {
			t.Fatalf("fired %+v, want one job", fired)
		}
		spans := spansNamed(sr, "rule after-outage")
		if len(spans) != 1 {
			t.Fatalf("%d firing spans, want 1 (one firing)", len(spans))
		}
		sp := spans[0]
		if sp.Parent().SpanID() != loop.SpanContext().SpanID() {
			t.Errorf("the firing's span is under %s, want the loop's %s", sp.Parent().SpanID(), loop.SpanContext().SpanID())
		}
		fs, err := New(s).Firings(ctx, "")
		if err != nil || len(fs) != 1 {
			t.Fatalf("firings %+v, %v", fs, err)
		}
		if spanAttr(sp, AttrRule).AsString() != rule.Name || spanAttr(sp, AttrOccurrence).AsString() != fired[0].Occurrence ||
			spanAttr(sp, catalog.AttrOutcome).AsString() != OutcomeJobCreated || spanAttr(sp, redrive.AttrJobID).AsInt64() != fired[0].JobID ||
			spanAttr(sp, catalog.AttrActor).AsString() != rule.Actor() || spanAttr(sp, catalog.AttrOp).AsString() != fs[0].Op {
			t.Errorf("the firing's span: %v (firing %+v)", sp.Attributes(), fs[0])
		}
		if open := spantest.Open(sr); len(open) > 0 {
			t.Errorf("spans left open: %v", open)
		}
		// Conservation: the entry is in the job, still pending until it runs.
		j, err := redrive.New(s).Job(ctx, fired[0].JobID)
		if err != nil || j.Total != 1 || j.State != redrive.JobQueued {
			t.Errorf("the firing's job %+v, %v; want one entry queued", j, err)
		}
		if got, err := s.Get(ctx, e.ID); err != nil || got.State != catalog.StatePending {
			t.Errorf("the entry after the firing: %+v, %v", got, err)
		}
	})
}

var spansNamed = spantest.Named

var spanAttr = spantest.Attr
