package transporttest

import (
	"fmt"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
)

// opTrace traces one poison message's whole path with the SDK's
// in-memory recorder: published inside a producer span, it fails twice
// (retried, then dead-lettered retries_exhausted), reaches the catalog, is
// redriven after the fix inside an operator's span and acked. Every span
// of it is in the producer's trace: the two failed attempts under the
// producer's span, the redrive's span under it too (linked to the
// operator's), the attempt after the redrive under the redrive's span.
// Deliveries given back by the broker (a rebalance) may add released
// attempts; they must be in the trace as well.
func opTrace(t *testing.T, e *opEnv) {
	const n = 2
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(e.ctx) })
	e.tp, e.rd.TracerProvider, e.transient = tp, tp, true

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
	res, err := e.rd.Redrive(octx, redrive.Params{Filter: catalog.Filter{Queue: e.qc.Name}, Actor: "transporttest", Target: e.target})
	operator.End()
	if err != nil || res.Redriven != n {
		t.Fatalf("redrive: %+v (%v), want %d redriven", res, err, n)
	}
	e.consumeRedriven(n, ids)

	want := prod.SpanContext()
	for _, id := range ids {
		var attempts, redrives []sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			if spanString(s, "messaging.message.id") != id {
				continue
			}
			switch s.Name() {
			case "process " + e.qc.Name:
				attempts = append(attempts, s)
			case "redrive " + e.qc.Name:
				redrives = append(redrives, s)
			}
		}
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
		for _, s := range attempts {
			o := spanString(s, string(lily.AttrOutcome))
			parent := want.SpanID()
			if o == string(lily.EventAcked) {
				parent = rs.SpanContext().SpanID()
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
		}
	}
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
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
