package lily_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/spantest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// tracedRun records what a traced consumer did.
type tracedRun struct {
	mu      sync.Mutex
	acked   []string
	dead    []string
	handled map[string][]trace.SpanContext // event ID -> the span in the handler's context, per call
}

func (r *tracedRun) Observe(_ context.Context, e lily.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case lily.EventAcked:
		r.acked = append(r.acked, e.EventID)
	case lily.EventDeadLettered:
		r.dead = append(r.dead, e.EventID)
	}
}

func (r *tracedRun) has(list *[]string, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(*list, id)
}

// attr returns a span attribute's value.
var attr = spantest.Attr

// TestOneTraceForAPoisonMessagesPath publishes inside a producer span on
// the SQLite store; the poison message fails twice, is dead-lettered,
// redriven after the fix and acked: one trace holds the producer's span,
// the two failed attempts under it, the dead letter's hand-off (the
// catalog write) under the second, the redrive's span (linked to the
// operator's) and the attempt after it, with the retry, redrive and
// outcome on each; no span is left open. A message published without a trace gets its
// first attempt's context, so its retry copy stays in that trace.
func TestOneTraceForAPoisonMessagesPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sr, tp := spantest.Recorder(t)

	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	off := false
	q := lily.QueueConfig{Name: "orders.created", RetryAttempts: 1, RetryBackoffMillis: new(int64(10)), Breaker: &off}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	pctx, prod := tp.Tracer("shop").Start(ctx, "publish orders.created", trace.WithSpanKind(trace.SpanKindProducer))
	if err := lily.Publish(pctx, tr, q.Name, []lily.Message{{EventID: "poison", Body: []byte(`{"sku":"retired"}`)}, {EventID: "fine", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	prod.End()
	if err := lily.Publish(ctx, tr, q.Name, []lily.Message{{EventID: "untraced", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}

	var fixed atomic.Bool
	var untracedCalls atomic.Int64
	run := &tracedRun{handled: map[string][]trace.SpanContext{}}
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		run.mu.Lock()
		run.handled[d.EventID] = append(run.handled[d.EventID], trace.SpanContextFromContext(ctx))
		run.mu.Unlock()
		switch {
		case d.EventID == "poison" && !fixed.Load():
			return errors.New("inventory: unknown sku retired")
		case d.EventID == "untraced" && untracedCalls.Add(1) == 1:
			return errors.New("gateway timeout")
		}
		return nil
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: q, ReceiveWait: 20 * time.Millisecond,
		Hooks: []lily.Hook{run}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	waittest.For(t, "the poison message dead-lettered, the others acked", func() bool {
		return run.has(&run.dead, "poison") && run.has(&run.acked, "fine") && run.has(&run.acked, "untraced")
	})

	// The fix is deployed; the operator redrives the dead letter.
	fixed.Store(true)
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	rd := redrive.New(cat)
	rd.TracerProvider = tp
	octx, operator := tp.Tracer("ops").Start(ctx, "operator redrives the fixed sku")
	res, err := rd.Redrive(octx, redrive.Params{Filter: catalog.Filter{Queue: q.Name, EventIDs: []string{"poison"}}, Actor: "test",
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	operator.End()
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive: %+v %v", res, err)
	}
	waittest.For(t, "the redriven message acked", func() bool { return run.has(&run.acked, "poison") })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The poison message's path: two attempts under the producer's span,
	// the redrive under it too (linked to the operator's span), the
	// attempt after the redrive under the redrive.
	byEvent := map[string][]sdktrace.ReadOnlySpan{}
	var redrives, handOffs []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "redrive "+q.Name {
			redrives = append(redrives, s)
		}
		if s.Name() == "dead-letter "+q.Name {
			handOffs = append(handOffs, s)
		}
		if s.Name() != "process "+q.Name {
			continue
		}
		id := attr(s, "messaging.message.id").AsString()
		byEvent[id] = append(byEvent[id], s)
	}
	type want struct {
		retry, redrive   int64
		outcome, errType string
	}
	wants := []want{{0, 0, "retried", "*errors.errorString"}, {1, 0, "dead_lettered", "*errors.errorString"}, {0, 1, "acked", ""}}
	spans := byEvent["poison"]
	if len(spans) != len(wants) {
		t.Fatalf("%d spans of the poison message, want %d (two failed attempts, the attempt after the redrive)", len(spans), len(wants))
	}
	if len(redrives) != 1 {
		t.Fatalf("%d redrive spans, want 1", len(redrives))
	}
	rs := redrives[0]
	if rs.SpanContext().TraceID() != prod.SpanContext().TraceID() || rs.Parent().SpanID() != prod.SpanContext().SpanID() || rs.SpanKind() != trace.SpanKindProducer {
		t.Errorf("the redrive span is in trace %s under %s (%s), want the producer's trace under its span", rs.SpanContext().TraceID(), rs.Parent().SpanID(), rs.SpanKind())
	}
	if l := rs.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != operator.SpanContext().SpanID() {
		t.Errorf("the redrive span links %v, want the operator's span", l)
	}
	if o := attr(rs, "lily.outcome").AsString(); o != "redriven" || attr(rs, "lily.redrive.actor").AsString() != "test" {
		t.Errorf("the redrive span: outcome %q actor %q", o, attr(rs, "lily.redrive.actor").AsString())
	}
	parents := []trace.SpanID{prod.SpanContext().SpanID(), prod.SpanContext().SpanID(), rs.SpanContext().SpanID()}
	for i, w := range wants {
		s := spans[i]
		if s.SpanContext().TraceID() != prod.SpanContext().TraceID() || s.Parent().SpanID() != parents[i] {
			t.Errorf("attempt %d is in trace %s under %s, want trace %s under %s", i+1,
				s.SpanContext().TraceID(), s.Parent().SpanID(), prod.SpanContext().TraceID(), parents[i])
		}
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("attempt %d: kind %s, want consumer", i+1, s.SpanKind())
		}
		got := want{attr(s, lily.AttrRetryCount).AsInt64(), attr(s, lily.AttrRedriveCount).AsInt64(),
			attr(s, lily.AttrOutcome).AsString(), attr(s, "error.type").AsString()}
		if got != w {
			t.Errorf("attempt %d: %+v, want %+v", i+1, got, w)
		}
		if (w.errType != "") != (s.Status().Code == codes.Error) {
			t.Errorf("attempt %d: status %v", i+1, s.Status())
		}
		for k, v := range map[attribute.Key]string{"messaging.system": "sqlite", "messaging.destination.name": q.Name, "messaging.operation.type": "process"} {
			if attr(s, k).AsString() != v {
				t.Errorf("attempt %d: %s = %q, want %q", i+1, k, attr(s, k).AsString(), v)
			}
		}
	}
	if r := attr(spans[1], lily.AttrDeadLetterReason).AsString(); r != "retries_exhausted" {
		t.Errorf("the dead-lettering attempt has reason %q, want retries_exhausted", r)
	}
	// The dead letter's hand-off — on SQLite the catalog write — under the
	// attempt that dead-lettered it.
	if len(handOffs) != 1 {
		t.Fatalf("%d dead-letter spans, want 1", len(handOffs))
	}
	h := handOffs[0]
	if h.Parent().SpanID() != spans[1].SpanContext().SpanID() || attr(h, lily.AttrDeadLetterStore).AsString() != "catalog" ||
		attr(h, "db.system.name").AsString() != "sqlite" || attr(h, "messaging.message.id").AsString() != "poison" || h.SpanKind() != trace.SpanKindProducer {
		t.Errorf("the hand-off span: under %s, %v; want under the dead-lettering attempt %s, stored in the sqlite catalog",
			h.Parent().SpanID(), h.Attributes(), spans[1].SpanContext().SpanID())
	}
	if open := spantest.Open(sr); len(open) > 0 {
		t.Errorf("spans left open: %v", open)
	}
	// The handler ran inside each attempt's span.
	for i, sc := range run.handled["poison"] {
		if sc.SpanID() != spans[i].SpanContext().SpanID() {
			t.Errorf("handler call %d ran in span %s, want its attempt's %s", i+1, sc.SpanID(), spans[i].SpanContext().SpanID())
		}
	}
	// The untraced message: its retry copy carries its first attempt's
	// context, so the second attempt is that span's child.
	if u := byEvent["untraced"]; len(u) != 2 || u[1].SpanContext().TraceID() != u[0].SpanContext().TraceID() || u[1].Parent().SpanID() != u[0].SpanContext().SpanID() {
		t.Errorf("the untraced message's attempts are not one trace: %d spans", len(u))
	}
	if f := byEvent["fine"]; len(f) != 1 || f[0].Parent().SpanID() != prod.SpanContext().SpanID() {
		t.Errorf("the fine message's attempt is not the producer's child: %d spans", len(f))
	}

	// Conservation: every message acked, the dead letter redriven, the
	// ledger balanced.
	acked := slices.Sorted(slices.Values(run.acked))
	if want := []string{"fine", "poison", "untraced"}; !slices.Equal(acked, want) {
		t.Errorf("acked %v, want %v", acked, want)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil || len(rows) != 1 || rows[0].Lost != 0 || rows[0].Acked != 3 {
		t.Errorf("ledger %+v %v, want 3 acked and nothing lost", rows, err)
	}
	if e, err := cat.List(ctx, catalog.Filter{Queue: q.Name}, 10); err != nil || len(e) != 1 || e[0].State != catalog.StateRedriven {
		t.Errorf("catalog: %s", fmt.Sprint(e, err))
	}
}

// TestTraceContextFromForeignHeaderTypes reads a traceparent as another
// producer's client sends it: Kafka clients carry header values as bytes,
// and a carrier that read strings only started a new root trace for every
// attempt of such a message, and a redrive replaced its trace.
func TestTraceContextFromForeignHeaderTypes(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for name, v := range map[string]any{"string": tp, "bytes": []byte(tp)} {
		sc := trace.SpanContextFromContext(lily.ExtractTraceContext(context.Background(), transport.Headers{"traceparent": v}))
		if !sc.IsValid() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("traceparent as %s: span context %v, want trace 0af7651916cd43dd8448eb211c80319c", name, sc)
		}
	}
	if sc := trace.SpanContextFromContext(lily.ExtractTraceContext(context.Background(), transport.Headers{"traceparent": 42})); sc.IsValid() {
		t.Errorf("a traceparent of another type is not trace context, got %v", sc)
	}
}

// swapKeys is a KeyStore for the ordering swaps: the key of event
// "waiting" waits with that event allowed through and cannot be moved on
// (AdvanceKey fails); every other key is free and cannot be held
// (HoldKey fails).
type swapKeys struct{}

func (swapKeys) KeyState(_ context.Context, _, key string) (string, string, string, error) {
	if key == "k-waiting" {
		return "waiting", "waiting", "waiting", nil
	}
	return "", "", "", nil
}
func (swapKeys) HoldKey(context.Context, string, string, string, string, string) error {
	return errors.New("catalog unreachable")
}
func (swapKeys) AdvanceKey(context.Context, string, string, transport.Transport) (bool, error) {
	return false, errors.New("catalog unreachable")
}
func (swapKeys) ResumeKeys(context.Context, string, transport.Transport) (int, error) { return 0, nil }

// TestOrderingSwapEndsTheAttemptSpan: on an ordered queue a decision the
// key store cannot record is replaced by a release — a failed attempt
// whose key cannot be held, a success whose key cannot be moved on. The
// attempt's span belongs to the delivery's ticket, so it ends once, with
// the release: the in-memory recorder holds no span left open, and each
// attempt's span says released.
func TestOrderingSwapEndsTheAttemptSpan(t *testing.T) {
	sr, tp := spantest.Recorder(t)
	q := &memQueue{}
	q.push(&transport.Delivery{Message: transport.Message{EventID: "failing", Key: "k-free"}, DeliveryCount: 1})
	q.push(&transport.Delivery{Message: transport.Message{EventID: "waiting", Key: "k-waiting"}, DeliveryCount: 1})
	off := false
	qc := lily.QueueConfig{Name: "swap.q", RetryAttempts: 1, Breaker: &off, Ordering: lily.OrderingPark}
	c, err := lily.NewConsumer(q, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if d.EventID == "failing" {
			return errors.New("dependency down")
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 5 * time.Millisecond, Keys: swapKeys{}, KeyPoll: time.Hour,
		TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	waittest.For(t, "both deliveries settled", func() bool {
		return q.action("failing") != 0 && q.action("waiting") != 0
	})
	stop()
	// Conservation: both deliveries were given back, none lost.
	for _, id := range []string{"failing", "waiting"} {
		if a := q.action(id); a != transport.Release {
			t.Errorf("%s settled as %s, want released (the key store failed)", id, a)
		}
	}
	started, ended := sr.Started(), sr.Ended()
	if open := spantest.Open(sr); len(open) > 0 {
		t.Errorf("spans left open: %v", open)
	}
	if len(started) != 2 || len(ended) != 2 {
		t.Fatalf("%d spans started, %d ended, want one attempt each of 2 deliveries", len(started), len(ended))
	}
	for _, s := range ended {
		if o := attr(s, lily.AttrOutcome).AsString(); o != string(lily.EventReleased) {
			t.Errorf("the attempt of %s ended with outcome %q, want released", attr(s, "messaging.message.id").AsString(), o)
		}
	}
}
