package transporttest

import (
	"fmt"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/spantest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
)

// opTrace traces one poison message's whole path with the SDK's
// in-memory recorder: published inside a producer span, it fails twice
// (retried, then dead-lettered retries_exhausted), reaches the catalog, is
// triaged and redriven after the fix inside an operator's span, and acked.
// Every span of it is in the producer's trace: the two failed attempts
// under the producer's span, the dead letter's hand-off under the second
// (on SQLite the catalog write itself), the ingest into the catalog (on a
// broker) under the producer's span, the redrive's span under it too
// (linked to the operator's), the attempt after the redrive under the
// redrive's span. The triage decision is in the operator's trace, linked
// to the message's. Deliveries given back by the broker (a rebalance) may
// add released attempts; they must be in the trace as well. No span is
// left open.
func opTrace(t *testing.T, e *opEnv) {
	const n = 2
	sr, tp := spantest.Recorder(t)
	e.tp, e.rd.TracerProvider, e.transient = tp, tp, true
	e.cat = e.cat.WithTracerProvider(tp) // the ingest and the triage traced

	base := e.ctx
	pctx, prod := tp.Tracer("transporttest").Start(base, "publish "+e.qc.Name, trace.WithSpanKind(trace.SpanKindProducer))
	e.ctx = pctx // publish inside the producer's span
	ids := e.publish(n)
	e.ctx = base
	prod.End()
	e.runUntilDead(n)
	e.ingest(e.qc.Name, n)

	e.fixed.Store(true)
	octx, operator := tp.Tracer("transporttest").Start(base, "operator redrives "+e.qc.Name)
	assignee := "ops-oncall"
	if tr, err := e.cat.TriageEntries(octx, catalog.TriageParams{Filter: catalog.Filter{Queue: e.qc.Name},
		Change: catalog.TriageChange{Assignee: &assignee}, Actor: "transporttest"}); err != nil || tr.Count != n {
		t.Fatalf("triage: %+v (%v), want %d entries triaged", tr, err, n)
	}
	res, err := e.rd.Redrive(octx, redrive.Params{Filter: catalog.Filter{Queue: e.qc.Name}, Actor: "transporttest", Target: e.target})
	operator.End()
	if err != nil || res.Redriven != n {
		t.Fatalf("redrive: %+v (%v), want %d redriven", res, err, n)
	}
	e.consumeRedriven(n, ids)

	want := prod.SpanContext()
	for _, id := range ids {
		spans := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range sr.Ended() {
			if spanString(s, "messaging.message.id") == id {
				spans[s.Name()] = append(spans[s.Name()], s)
			}
		}
		attempts := spans["process "+e.qc.Name]
		redrives := spans["redrive "+e.qc.Name]
		if len(redrives) != 1 {
			t.Errorf("%s: %d redrive spans, want 1", id, len(redrives))
			continue
		}
		rs := redrives[0]
		if rs.SpanContext().TraceID() != want.TraceID() || rs.Parent().SpanID() != want.SpanID() {
			t.Errorf("%s: the redrive span is in trace %s under %s, want %s under the producer's %s", id,
				rs.SpanContext().TraceID(), rs.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
		if l := rs.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != operator.SpanContext().SpanID() {
			t.Errorf("%s: the redrive span's links %v, want the operator's span", id, l)
		}
		var outcomes []string
		var deadAttempt sdktrace.ReadOnlySpan
		for _, s := range attempts {
			o := spanString(s, string(lily.AttrOutcome))
			parent := want.SpanID()
			if o == string(lily.EventAcked) {
				parent = rs.SpanContext().SpanID()
			}
			if o == string(lily.EventDeadLettered) {
				deadAttempt = s
			}
			if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != parent {
				t.Errorf("%s: the %s attempt is in trace %s under %s, want %s under %s", id, o,
					s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), parent)
			}
			if o != string(lily.EventReleased) {
				outcomes = append(outcomes, fmt.Sprintf("%s(retry %d, redrive %d)", o,
					spanInt(s, lily.AttrRetryCount), spanInt(s, lily.AttrRedriveCount)))
			}
		}
		if w := []string{"retried(retry 0, redrive 0)", "dead_lettered(retry 1, redrive 0)", "acked(retry 0, redrive 1)"}; !slices.Equal(outcomes, w) {
			t.Errorf("%s: attempts %v, want %v", id, outcomes, w)
			continue
		}
		checkCatalogSpans(t, e.qc.Name, id, spans, deadAttempt, want, operator.SpanContext())
	}
	if open := spantest.Open(sr); len(open) > 0 {
		t.Errorf("spans left open: %v", open)
	}
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
}

// checkCatalogSpans checks the spans of one message's way into the
// catalog and of the operator's triage of it: the hand-off of its dead
// letter under the attempt that dead-lettered it — the catalog write on
// SQLite, the copy to the broker's dead-letter queue else; then, from a
// broker, the ingest into the catalog under the producer's span (prod);
// the triage in the operator's trace, linked to the message's.
func checkCatalogSpans(t *testing.T, queue, id string, spans map[string][]sdktrace.ReadOnlySpan, deadAttempt sdktrace.ReadOnlySpan, prod, operator trace.SpanContext) {
	t.Helper()
	hand := spans["dead-letter "+queue]
	if len(hand) != 1 {
		t.Errorf("%s: %d dead-letter hand-off spans, want 1", id, len(hand))
		return
	}
	h := hand[0]
	if h.Parent().SpanID() != deadAttempt.SpanContext().SpanID() || h.SpanContext().TraceID() != prod.TraceID() ||
		spanString(h, string(lily.AttrDeadLetterReason)) != "retries_exhausted" {
		t.Errorf("%s: the hand-off span is under %s in trace %s with reason %q, want under the dead-lettering attempt %s, reason retries_exhausted",
			id, h.Parent().SpanID(), h.SpanContext().TraceID(), spanString(h, string(lily.AttrDeadLetterReason)), deadAttempt.SpanContext().SpanID())
	}
	switch store := spanString(h, string(lily.AttrDeadLetterStore)); store {
	case "catalog":
		if spanString(h, "db.collection.name") != "lily_dlq_entries" || spanString(h, "db.operation.name") != "INSERT" {
			t.Errorf("%s: the catalog write of the hand-off lacks db.collection.name / db.operation.name", id)
		}
	case "broker":
		ing := spans["ingest "+queue]
		if len(ing) == 0 {
			t.Errorf("%s: no ingest span: the dead letter's catalog write is not traced", id)
			break
		}
		for _, s := range ing {
			if s.SpanContext().TraceID() != prod.TraceID() || s.Parent().SpanID() != prod.SpanID() ||
				spanString(s, string(catalog.AttrReason)) != "retries_exhausted" || spanString(s, "db.operation.name") != "INSERT" {
				t.Errorf("%s: the ingest span is in trace %s under %s (reason %q), want the producer's trace under its span",
					id, s.SpanContext().TraceID(), s.Parent().SpanID(), spanString(s, string(catalog.AttrReason)))
			}
		}
	default:
		t.Errorf("%s: the hand-off span's %s is %q, want catalog or broker", id, lily.AttrDeadLetterStore, store)
	}
	tri := spans["triage "+queue]
	if len(tri) != 1 {
		t.Errorf("%s: %d triage spans, want 1", id, len(tri))
		return
	}
	d := tri[0]
	if d.Parent().SpanID() != operator.SpanID() || d.SpanContext().TraceID() != operator.TraceID() {
		t.Errorf("%s: the triage span is under %s, want the operator's span %s", id, d.Parent().SpanID(), operator.SpanID())
	}
	if l := d.Links(); len(l) != 1 || l[0].SpanContext.TraceID() != prod.TraceID() {
		t.Errorf("%s: the triage span's links %v, want one to the message's trace %s", id, l, prod.TraceID())
	}
	if spanString(d, string(catalog.AttrDecision)) != catalog.ActionTriage || spanString(d, string(catalog.AttrActor)) != "transporttest" ||
		spanString(d, string(catalog.AttrOutcome)) != catalog.OutcomeTriaged || spanString(d, string(catalog.AttrOp)) == "" {
		t.Errorf("%s: the triage span's decision %q actor %q outcome %q op %q", id, spanString(d, string(catalog.AttrDecision)),
			spanString(d, string(catalog.AttrActor)), spanString(d, string(catalog.AttrOutcome)), spanString(d, string(catalog.AttrOp)))
	}
}

func spanString(s sdktrace.ReadOnlySpan, k string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

func spanInt(s sdktrace.ReadOnlySpan, k attribute.Key) int64 {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.AsInt64()
		}
	}
	return -1
}
