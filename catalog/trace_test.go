package catalog

import (
	"context"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/spantest"
	"github.com/lily-mq/lily/transport"
)

var spanAttr = spantest.Attr

// TestDecisionSpans: with a traced view of the store, each entry an
// operator decides about — discarded, erased, edited, triaged; a dry run
// too — is one span in the operator's context, linked to the message's
// trace from the traceparent stored with the entry, carrying the
// decision, the actor, the operation ID, the outcome and the event ID; a
// group's triage is one span without a link. A store without a
// TracerProvider makes none, and every span ends.
func TestDecisionSpans(t *testing.T) {
	eachStore(t, func(t *testing.T, plain *Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		es := []*Entry{entry("q.decide", "d-discard", evidence.ReasonPermanent, StatePending, "bad"),
			entry("q.decide", "d-erase", evidence.ReasonPermanent, StatePending, "bad"),
			entry("q.decide", "d-edit", evidence.ReasonPermanent, StatePending, "bad")}
		if err := plain.Insert(ctx, es...); err != nil {
			t.Fatal(err)
		}
		// Untraced: no span.
		if _, err := plain.TriageEntries(ctx, TriageParams{Filter: Filter{Queue: "q.decide"}, Change: TriageChange{Note: "seen"}, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if n := len(sr.Started()); n != 0 {
			t.Fatalf("a store without a TracerProvider started %d spans", n)
		}
		s := plain.WithTracerProvider(tp)
		octx, op := tp.Tracer("ops").Start(ctx, "operator")
		status := TriageNeedsFix
		if _, err := s.TriageEntries(octx, TriageParams{Filter: Filter{EventIDs: []string{"d-discard"}}, Change: TriageChange{Status: &status}, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Discard(octx, DecideParams{Filter: Filter{EventIDs: []string{"d-discard"}}, Reason: "dry", DryRun: true, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Discard(octx, DecideParams{Filter: Filter{EventIDs: []string{"d-discard"}}, Reason: "obsolete order", Actor: "alice", Op: "op-discard"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Erase(octx, DecideParams{Filter: Filter{EventIDs: []string{"d-erase"}}, Reason: "data subject request", Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Edit(octx, EditParams{ID: es[2].ID, Body: []byte(`{"id":"fixed"}`), Reason: "fix the sku", ContentType: "application/json", Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		fp := es[0].Fingerprint
		if _, err := s.TriageGroup(octx, TriageGroupParams{Queue: "q.decide", Fingerprint: fp, Change: TriageChange{Status: &status}, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		op.End()

		msgTrace := "0af7651916cd43dd8448eb211c80319c" // evidenceHeaders' traceparent
		type want struct{ name, event, decision, outcome string }
		wants := []want{
			{"triage q.decide", "d-discard", ActionTriage, OutcomeTriaged},
			{"discard q.decide", "d-discard", ActionDiscard, OutcomeWouldDiscard},
			{"discard q.decide", "d-discard", ActionDiscard, OutcomeDiscarded},
			{"erase q.decide", "d-erase", ActionErase, OutcomeErased},
			{"edit q.decide", "d-edit", ActionEdit, OutcomeEdited},
		}
		var got []sdktrace.ReadOnlySpan
		for _, sp := range sr.Ended() {
			if sp.Name() != "operator" {
				got = append(got, sp)
			}
		}
		// The group's triage: one span, no link (the group covers dead
		// letters to come).
		if len(got) != len(wants)+1 {
			t.Fatalf("%d decision spans, want %d (one per entry decided, one for the group)", len(got), len(wants)+1)
		}
		{
			g := got[len(got)-1]
			got = got[:len(got)-1]
			if g.Name() != "triage q.decide" || spanAttr(g, AttrFingerprint).AsString() != fp || len(g.Links()) != 0 ||
				spanAttr(g, "db.collection.name").AsString() != "lily_triage_groups" || g.Parent().SpanID() != op.SpanContext().SpanID() {
				t.Errorf("the group triage's span: %s %v links %v", g.Name(), g.Attributes(), g.Links())
			}
		}
		if len(got) != len(wants) {
			t.Fatalf("%d decision spans, want %d", len(got), len(wants))
		}
		for i, w := range wants {
			sp := got[i]
			g := want{sp.Name(), spanAttr(sp, "messaging.message.id").AsString(), spanAttr(sp, AttrDecision).AsString(), spanAttr(sp, AttrOutcome).AsString()}
			if g != w {
				t.Errorf("span %d: %+v, want %+v", i, g, w)
			}
			if sp.Parent().SpanID() != op.SpanContext().SpanID() || sp.SpanContext().TraceID() != op.SpanContext().TraceID() {
				t.Errorf("%s: under %s, want the operator's span %s", sp.Name(), sp.Parent().SpanID(), op.SpanContext().SpanID())
			}
			if l := sp.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != msgTrace {
				t.Errorf("%s: links %v, want one to the message's trace %s", sp.Name(), l, msgTrace)
			}
			if spanAttr(sp, AttrActor).AsString() != "alice" || spanAttr(sp, AttrOp).AsString() == "" || spanAttr(sp, AttrEntryID).AsInt64() == 0 ||
				spanAttr(sp, "db.system.name").AsString() != plain.dbSystem() || spanAttr(sp, "db.collection.name").AsString() == "" {
				t.Errorf("%s: attributes %v", sp.Name(), sp.Attributes())
			}
			if sp.SpanKind() != trace.SpanKindInternal {
				t.Errorf("%s: kind %s, want internal", sp.Name(), sp.SpanKind())
			}
		}
		if o := spanAttr(got[2], AttrOp).AsString(); o != "op-discard" {
			t.Errorf("the discard's span has op %q, want op-discard", o)
		}
		// An entry stored without trace context: the span links nowhere
		// (never to the operator's own span).
		bare := entry("q.decide", "d-bare", evidence.ReasonPermanent, StatePending, "bad")
		delete(bare.Headers, "traceparent")
		if err := plain.Insert(ctx, bare); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Edit(octx, EditParams{ID: bare.ID, Body: []byte(`{"id":"fixed"}`), Reason: "fix", ContentType: "application/json", Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if ended := sr.Ended(); len(ended[len(ended)-1].Links()) != 0 || ended[len(ended)-1].Name() != "edit q.decide" {
			t.Errorf("the edit of an entry without trace context: %s links %v, want none", ended[len(ended)-1].Name(), ended[len(ended)-1].Links())
		}
		if open := spantest.Open(sr); len(open) > 0 {
			t.Errorf("spans left open: %v", open)
		}
		// Conservation: the three entries decided, none lost.
		for _, c := range []struct {
			id    int64
			state State
		}{{es[0].ID, StateDiscarded}, {es[1].ID, StateErased}, {es[2].ID, StatePending}} {
			if e, err := plain.Get(ctx, c.id); err != nil || e.State != c.state {
				t.Errorf("entry %d: %v %v, want %s", c.id, e, err, c.state)
			}
		}
	})
}

// TestIngestSpans: each dead letter a traced view ingests is one span in
// the message's trace, a child of its traceparent, with the reason and
// whether it was added; drained again (a crash before the broker's ack)
// it is a span with added false. An untraced dead letter is a root span.
func TestIngestSpans(t *testing.T) {
	eachStore(t, func(t *testing.T, plain *Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		s := plain.WithTracerProvider(tp)
		traced := delivery("q.ingest", "i-traced", `{}`)
		traced.Headers = evidenceHeaders(evidence.ReasonRetriesExhausted, "*errors.errorString", "down", "v1", 1, 3, 0)
		bare := delivery("q.ingest", "i-bare", `{}`)
		for round := range 2 {
			if n, err := s.Ingest(ctx, &fakeDrainer{waiting: []*transport.Delivery{traced, bare}, batch: 2}, "q.ingest"); err != nil || n != 2 {
				t.Fatalf("ingest round %d: %d %v", round, n, err)
			}
		}
		spans := sr.Ended()
		if len(spans) != 4 {
			t.Fatalf("%d spans, want 4 (2 dead letters, drained twice)", len(spans))
		}
		for i, sp := range spans {
			id := spanAttr(sp, "messaging.message.id").AsString()
			added := spanAttr(sp, AttrAdded).AsBool()
			if sp.Name() != "ingest q.ingest" || sp.SpanKind() != trace.SpanKindConsumer || added != (i < 2) ||
				spanAttr(sp, "db.operation.name").AsString() != "INSERT" || spanAttr(sp, "db.system.name").AsString() != plain.dbSystem() {
				t.Errorf("span %d (%s): %s %s %v, want ingest q.ingest, consumer, added %v", i, id, sp.Name(), sp.SpanKind(), sp.Attributes(), i < 2)
			}
			switch id {
			case "i-traced":
				if sp.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sp.Parent().SpanID().String() != "b7ad6b7169203331" ||
					spanAttr(sp, AttrReason).AsString() != string(evidence.ReasonRetriesExhausted) {
					t.Errorf("the traced dead letter's span: trace %s under %s, reason %q; want the message's trace under its traceparent",
						sp.SpanContext().TraceID(), sp.Parent().SpanID(), spanAttr(sp, AttrReason).AsString())
				}
			case "i-bare":
				if sp.Parent().IsValid() {
					t.Errorf("the dead letter without trace context has parent %s, want a root span", sp.Parent().SpanID())
				}
			}
		}
		if open := spantest.Open(sr); len(open) > 0 {
			t.Errorf("spans left open: %v", open)
		}
		// Conservation: each dead letter is one entry, however often drained.
		if n, err := plain.CountBy(ctx, "state", Filter{Queue: "q.ingest"}); err != nil || n[string(StatePending)] != 2 || len(n) != 1 {
			t.Errorf("entries by state %v %v, want 2 pending", n, err)
		}
	})
}

// TestExpireSpans: an expiry is an automatic decision — no operator —
// and each entry it discards is a span "expire <queue>" in the caller's
// context (a root span when it has none, as from a consumer's periodic
// expiry), linked to the message's trace, with the retention actor and
// outcome; an entry within its retention is neither expired nor traced.
func TestExpireSpans(t *testing.T) {
	eachStore(t, func(t *testing.T, plain *Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		old := entry("q.expire", "x-old", evidence.ReasonPermanent, StatePending, "bad")
		fresh := entry("q.expire", "x-fresh", evidence.ReasonPermanent, StatePending, "bad")
		fresh.DeadLetteredAt = testNow.Add(47 * time.Hour)
		if err := plain.Insert(ctx, old, fresh); err != nil {
			t.Fatal(err)
		}
		res, err := plain.WithTracerProvider(tp).Expire(ctx, ExpireParams{Queues: []string{"q.expire"}, Actor: "retention",
			Retention: func(string) time.Duration { return 24 * time.Hour }, Now: func() time.Time { return testNow.Add(48 * time.Hour) }})
		if err != nil || res.Count != 1 {
			t.Fatalf("Expire = %+v, %v; want the old entry alone", res, err)
		}
		ended := sr.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans, want one for the one entry expired", len(ended))
		}
		sp := ended[0]
		if sp.Name() != "expire q.expire" || sp.Parent().IsValid() || spanAttr(sp, "messaging.message.id").AsString() != "x-old" ||
			spanAttr(sp, AttrDecision).AsString() != ActionExpire || spanAttr(sp, AttrOutcome).AsString() != OutcomeExpired ||
			spanAttr(sp, AttrActor).AsString() != "retention" {
			t.Errorf("the expiry's span: %s parent %v %v", sp.Name(), sp.Parent(), sp.Attributes())
		}
		if l := sp.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("the expiry's links %v, want one to the message's trace", l)
		}
		if open := spantest.Open(sr); len(open) > 0 {
			t.Errorf("spans left open: %v", open)
		}
		// Conservation: the old entry discarded with a record, the fresh one kept.
		for id, want := range map[int64]State{old.ID: StateDiscarded, fresh.ID: StatePending} {
			if e, err := plain.Get(ctx, id); err != nil || e.State != want {
				t.Errorf("entry %d: %v %v, want %s", id, e, err, want)
			}
		}
	})
}

// TestPauseSpans: pausing and resuming a queue are operator decisions
// about no message: one span each, in the operator's context, without a
// link, with the decision, the actor and the outcome (a second pause
// changes nothing and says so).
func TestPauseSpans(t *testing.T) {
	eachStore(t, func(t *testing.T, plain *Store) {
		ctx := context.Background()
		sr, tp := spantest.Recorder(t)
		s := plain.WithTracerProvider(tp)
		octx, op := tp.Tracer("ops").Start(ctx, "operator")
		for _, f := range []func() (bool, error){
			func() (bool, error) { return s.PauseQueue(octx, "q.pause", "maintenance", "alice", testNow) },
			func() (bool, error) { return s.PauseQueue(octx, "q.pause", "again", "alice", testNow) },
			func() (bool, error) { return s.ResumeQueue(octx, "q.pause", "alice", testNow) },
		} {
			if _, err := f(); err != nil {
				t.Fatal(err)
			}
		}
		op.End()
		var got []string
		for _, sp := range sr.Ended() {
			if sp.Name() == "operator" {
				continue
			}
			got = append(got, sp.Name()+" "+spanAttr(sp, AttrOutcome).AsString())
			if sp.Parent().SpanID() != op.SpanContext().SpanID() || len(sp.Links()) != 0 || spanAttr(sp, AttrActor).AsString() != "alice" ||
				spanAttr(sp, "db.collection.name").AsString() != "lily_queue_pauses" {
				t.Errorf("%s: parent %s links %v attributes %v", sp.Name(), sp.Parent().SpanID(), sp.Links(), sp.Attributes())
			}
		}
		want := []string{"pause q.pause " + OutcomePaused, "pause q.pause " + OutcomeAlreadyPaused, "resume q.pause " + OutcomeResumed}
		if !slices.Equal(got, want) {
			t.Errorf("spans %v, want %v", got, want)
		}
		if ps, err := plain.Pauses(ctx); err != nil || len(ps) != 0 {
			t.Errorf("pauses after the resume: %v %v", ps, err)
		}
	})
}
