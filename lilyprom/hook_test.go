package lilyprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// workload is the mixed traffic of TestHookCountsRealConsumer, by event ID
// prefix: what the handler does with it.
const (
	okPrefix        = "ok-"        // acked
	permanentPrefix = "permanent-" // dead-lettered at once, reason permanent
	flakyPrefix     = "flaky-"     // fails once, acked after one retry
	hopelessPrefix  = "hopeless-"  // fails every time: retried, then retries_exhausted
	badCountPrefix  = "badcount-"  // x-retry-count "0" (a string): invalid_retry_count, handler not called
)

// runWorkload publishes msgs to queue on tr and consumes them with hooks
// until every message is acked or dead-lettered.
func runWorkload(t *testing.T, tr *sqlite.Transport, queue string, msgs []lily.Message, hooks ...lily.Hook) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	off := false
	q := lily.QueueConfig{Name: queue, RetryAttempts: 1, RetryBackoffMillis: new(int64(10)), Breaker: &off}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, queue, msgs); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var settled atomic.Int64
	done := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventAcked || e.Kind == lily.EventDeadLettered {
			if settled.Add(1) == int64(len(msgs)) {
				stop()
			}
		}
	})
	handler := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		switch {
		case strings.HasPrefix(d.EventID, permanentPrefix):
			return lily.Permanent(errors.New("decode: bad body"))
		case strings.HasPrefix(d.EventID, flakyPrefix) && d.RetryCount == 0:
			return errors.New("inventory service: connection refused")
		case strings.HasPrefix(d.EventID, hopelessPrefix):
			return errors.New("inventory service: 503")
		}
		return nil
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{
		Queue: q, Hooks: append(hooks, done), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s: only %d of %d messages settled within a minute", queue, settled.Load(), len(msgs))
	}
}

// messages builds n messages with the given event ID prefix.
func messages(prefix string, n int) []lily.Message {
	out := make([]lily.Message, n)
	for i := range out {
		out[i] = lily.Message{EventID: fmt.Sprintf("%s%d", prefix, i), Body: []byte("{}")}
		if prefix == badCountPrefix {
			out[i].Headers = lily.Headers{evidence.HeaderRetryCount: "0"}
		}
	}
	return out
}

func openTransport(t *testing.T) *sqlite.Transport {
	t.Helper()
	tr, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestHookCountsRealConsumer drives real consumers of two queues on the
// SQLite transport with one Hook and checks every counter exactly.
func TestHookCountsRealConsumer(t *testing.T) {
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	tr := openTransport(t)
	var orders []lily.Message
	for _, p := range []struct {
		prefix string
		n      int
	}{{okPrefix, 5}, {permanentPrefix, 2}, {flakyPrefix, 1}, {hopelessPrefix, 1}, {badCountPrefix, 1}} {
		orders = append(orders, messages(p.prefix, p.n)...)
	}
	runWorkload(t, tr, "orders.created", orders, hook)
	runWorkload(t, tr, "payments.captured", messages(okPrefix, 3), hook)

	// orders: 5 ok + 1 flaky after its retry = 6 acked; the flaky and the
	// hopeless one were retried once; 2 permanent + 1 hopeless + 1 bad count
	// = 4 dead-lettered.
	want := `
# HELP lily_messages_total Settled deliveries by outcome: acked, retried, dead_lettered, released, held, settle_failed, parked.
# TYPE lily_messages_total counter
lily_messages_total{outcome="acked",queue="orders.created"} 6
lily_messages_total{outcome="dead_lettered",queue="orders.created"} 4
lily_messages_total{outcome="held",queue="orders.created"} 0
lily_messages_total{outcome="parked",queue="orders.created"} 0
lily_messages_total{outcome="released",queue="orders.created"} 0
lily_messages_total{outcome="retried",queue="orders.created"} 2
lily_messages_total{outcome="settle_failed",queue="orders.created"} 0
lily_messages_total{outcome="acked",queue="payments.captured"} 3
lily_messages_total{outcome="dead_lettered",queue="payments.captured"} 0
lily_messages_total{outcome="held",queue="payments.captured"} 0
lily_messages_total{outcome="parked",queue="payments.captured"} 0
lily_messages_total{outcome="released",queue="payments.captured"} 0
lily_messages_total{outcome="retried",queue="payments.captured"} 0
lily_messages_total{outcome="settle_failed",queue="payments.captured"} 0
# HELP lily_dlq_inflow_total Messages dead-lettered by this process's consumers, by dead-letter reason; in 'lily serve', also the dead letters a broker made by itself, counted as they are ingested.
# TYPE lily_dlq_inflow_total counter
lily_dlq_inflow_total{queue="orders.created",reason="delivery_limit"} 0
lily_dlq_inflow_total{queue="orders.created",reason="invalid_retry_count"} 1
lily_dlq_inflow_total{queue="orders.created",reason="permanent"} 2
lily_dlq_inflow_total{queue="orders.created",reason="retries_exhausted"} 1
lily_dlq_inflow_total{queue="payments.captured",reason="delivery_limit"} 0
lily_dlq_inflow_total{queue="payments.captured",reason="invalid_retry_count"} 0
lily_dlq_inflow_total{queue="payments.captured",reason="permanent"} 0
lily_dlq_inflow_total{queue="payments.captured",reason="retries_exhausted"} 0
# HELP lily_breaker_state Circuit breaker state of the queue's consumer: 0 closed, 1 half_open, 2 open.
# TYPE lily_breaker_state gauge
lily_breaker_state{queue="orders.created"} 0
lily_breaker_state{queue="payments.captured"} 0
# HELP lily_redrive_total Redriven dead letters by outcome: redriven, needs_manual, failed.
# TYPE lily_redrive_total counter
lily_redrive_total{outcome="failed",queue="orders.created"} 0
lily_redrive_total{outcome="needs_manual",queue="orders.created"} 0
lily_redrive_total{outcome="redriven",queue="orders.created"} 0
lily_redrive_total{outcome="failed",queue="payments.captured"} 0
lily_redrive_total{outcome="needs_manual",queue="payments.captured"} 0
lily_redrive_total{outcome="redriven",queue="payments.captured"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		lilyprom.MetricMessages, lilyprom.MetricDLQInflow, lilyprom.MetricBreakerState, lilyprom.MetricRedrive); err != nil {
		t.Error(err)
	}

	// The handler ran 5 + 2 + 2 (flaky) + 2 (hopeless) = 11 times for
	// orders (never for the bad count) and 3 times for payments.
	counts := histogramCounts(t, reg, lilyprom.MetricHandlerDuration)
	if counts["orders.created"] != 11 || counts["payments.captured"] != 3 {
		t.Errorf("handler duration observations = %v, want orders.created 11, payments.captured 3", counts)
	}
	// The 6 acks of orders: 5 at retry 0, the flaky one at retry 1 (the
	// buckets themselves: TestRetriesAtAck).
	if got := histogramCounts(t, reg, lilyprom.MetricRetriesAtAck); got["orders.created"] != 6 || got["payments.captured"] != 3 {
		t.Errorf("retries-at-ack observations = %v, want one per ack: orders.created 6, payments.captured 3", got)
	}
	if sum := retriesSum(t, reg, "orders.created"); sum != 1 {
		t.Errorf("retries at ack of orders.created sum to %v, want 1 (the flaky order)", sum)
	}
}

// retriesSum returns the sum of queue's lily_retries_at_ack.
func retriesSum(t *testing.T, g prometheus.Gatherer, queue string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == lilyprom.MetricRetriesAtAck && label(m, lilyprom.LabelQueue) == queue {
				return m.GetHistogram().GetSampleSum()
			}
		}
	}
	return -1
}

// histogramCounts returns the sample count of a histogram per queue.
func histogramCounts(t *testing.T, g prometheus.Gatherer, name string) map[string]uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[label(m, lilyprom.LabelQueue)] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestHookBreakerAndEdgeCases feeds the Hook events directly: breaker
// transitions, a settlement failure, a release, a fault (not counted
// twice), unknown reasons and kinds, redrive outcomes.
func TestHookBreakerAndEdgeCases(t *testing.T) {
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := "orders.created"
	gauge := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == lilyprom.MetricBreakerState {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no breaker gauge")
		return -1
	}
	for _, c := range []struct {
		state lily.BreakerState
		want  float64
	}{{lily.BreakerOpen, 2}, {lily.BreakerHalfOpen, 1}, {lily.BreakerOpen, 2}, {lily.BreakerHalfOpen, 1}, {lily.BreakerClosed, 0}} {
		hook.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: q, Breaker: c.state})
		if got := gauge(); got != c.want {
			t.Errorf("after breaker %s: gauge = %v, want %v", c.state, got, c.want)
		}
	}
	abandoned := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == lilyprom.MetricAbandoned {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no abandoned-handlers gauge")
		return -1
	}
	for _, c := range []struct {
		kind lily.EventKind
		n    int
	}{{lily.EventAbandoned, 1}, {lily.EventAbandoned, 2}, {lily.EventStalled, 2}, {lily.EventAbandoned, 1}, {lily.EventAbandoned, 0}} {
		hook.Observe(ctx, lily.Event{Kind: c.kind, Queue: q, Abandoned: c.n})
		if got := abandoned(); got != float64(c.n) {
			t.Errorf("after %s with %d: abandoned gauge = %v, want %d", c.kind, c.n, got, c.n)
		}
	}
	ms := 20 * time.Millisecond
	for _, e := range []lily.Event{
		{Kind: lily.EventHeld, Queue: q, EventID: "e1", HandlerDuration: ms},
		{Kind: lily.EventFault, Queue: q, EventID: "e2", HandlerDuration: ms},    // reported beside:
		{Kind: lily.EventReleased, Queue: q, EventID: "e2", HandlerDuration: ms}, // its outcome
		{Kind: lily.EventSettleFailed, Queue: q, EventID: "e3", Reason: "permanent"},
		{Kind: lily.EventDeadLettered, Queue: q, EventID: "e4", Reason: "made-up reason e4"},
		{Kind: lily.EventDeadLettered, Queue: q, EventID: "e5", Reason: string(evidence.ReasonMaxLen)},
		{Kind: "teleported", Queue: q, EventID: "e6"},
	} {
		hook.Observe(ctx, e)
	}
	hook.Redrive(q, lilyprom.RedriveRedriven)
	hook.Redrive(q, lilyprom.RedriveRedriven)
	hook.Redrive(q, lilyprom.RedriveNeedsManual)
	hook.Redrive(q, "would_redrive") // a dry run: not counted
	hook.Redrive(q, "vanished")
	want := `
# HELP lily_messages_total Settled deliveries by outcome: acked, retried, dead_lettered, released, held, settle_failed, parked.
# TYPE lily_messages_total counter
lily_messages_total{outcome="acked",queue="orders.created"} 0
lily_messages_total{outcome="dead_lettered",queue="orders.created"} 2
lily_messages_total{outcome="held",queue="orders.created"} 1
lily_messages_total{outcome="parked",queue="orders.created"} 0
lily_messages_total{outcome="released",queue="orders.created"} 1
lily_messages_total{outcome="retried",queue="orders.created"} 0
lily_messages_total{outcome="settle_failed",queue="orders.created"} 1
# HELP lily_dlq_inflow_total Messages dead-lettered by this process's consumers, by dead-letter reason; in 'lily serve', also the dead letters a broker made by itself, counted as they are ingested.
# TYPE lily_dlq_inflow_total counter
lily_dlq_inflow_total{queue="orders.created",reason="delivery_limit"} 0
lily_dlq_inflow_total{queue="orders.created",reason="invalid_retry_count"} 0
lily_dlq_inflow_total{queue="orders.created",reason="maxlen"} 1
lily_dlq_inflow_total{queue="orders.created",reason="other"} 1
lily_dlq_inflow_total{queue="orders.created",reason="permanent"} 0
lily_dlq_inflow_total{queue="orders.created",reason="retries_exhausted"} 0
# HELP lily_redrive_total Redriven dead letters by outcome: redriven, needs_manual, failed.
# TYPE lily_redrive_total counter
lily_redrive_total{outcome="failed",queue="orders.created"} 0
lily_redrive_total{outcome="needs_manual",queue="orders.created"} 1
lily_redrive_total{outcome="other",queue="orders.created"} 1
lily_redrive_total{outcome="redriven",queue="orders.created"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		lilyprom.MetricMessages, lilyprom.MetricDLQInflow, lilyprom.MetricRedrive); err != nil {
		t.Error(err)
	}
	// held and released ran the handler; the fault is not observed again.
	if got := histogramCounts(t, reg, lilyprom.MetricHandlerDuration)[q]; got != 2 {
		t.Errorf("handler duration observations = %d, want 2 (held, released)", got)
	}
}

// TestHookCardinalityBounded floods the Hook with thousands of distinct
// event IDs, reasons, error texts and kinds: the number of series stays
// fixed per queue and no label carries an event ID.
func TestHookCardinalityBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	hook.Init("orders.created")
	before := seriesCount(t, reg)
	ctx := context.Background()
	kinds := []lily.EventKind{lily.EventAcked, lily.EventRetried, lily.EventDeadLettered, lily.EventReleased,
		lily.EventSettleFailed, lily.EventFault, lily.EventHeld, "mystery"}
	for i := range 5000 {
		id := fmt.Sprintf("evt-%06d", i)
		hook.Observe(ctx, lily.Event{Kind: kinds[i%len(kinds)], Queue: "orders.created", EventID: id,
			Reason: "reason " + id, Err: errors.New("error for " + id), HandlerDuration: time.Duration(i) * time.Microsecond})
		hook.Redrive("orders.created", "outcome "+id)
	}
	after := seriesCount(t, reg)
	// Unknown reasons and redrive outcomes add one "other" series each.
	if after != before+2 {
		t.Errorf("series grew from %d to %d under 5000 distinct event IDs; want %d", before, after, before+2)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{lilyprom.LabelQueue: true, lilyprom.LabelOutcome: true, lilyprom.LabelReason: true, "le": true}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %q", mf.GetName(), l.GetName())
				}
				if strings.Contains(l.GetValue(), "evt-") {
					t.Errorf("%s label %s carries an event ID: %q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// seriesCount counts the series (histograms as one) in g.
func seriesCount(t *testing.T, g prometheus.Gatherer) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// TestNewHookTwiceOnOneRegistry: the second Hook's metrics collide.
func TestNewHookTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := lilyprom.NewHook(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := lilyprom.NewHook(reg); err == nil {
		t.Fatal("a second Hook on the same registry registered without error")
	}
}

// TestHookCountsRefusedDeadLetters (issue 30, item 2): a dead-lettering
// stored in the catalog only because the broker refused its copy
// (Event.Refused) is counted in lily_dlq_refused_total, as well as in the
// dead-letter inflow.
func TestHookCountsRefusedDeadLetters(t *testing.T) {
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hook.Init("payments")
	hook.Observe(ctx, lily.Event{Kind: lily.EventDeadLettered, Queue: "orders", EventID: "e1", Reason: "permanent"})
	hook.Observe(ctx, lily.Event{Kind: lily.EventDeadLettered, Queue: "orders", EventID: "e2", Reason: "permanent", Refused: "the dead-letter queue orders.dlq.v2 is full"})
	hook.Observe(ctx, lily.Event{Kind: lily.EventDeadLettered, Queue: "orders", EventID: "e3", Reason: "retries_exhausted", Refused: "frame_max"})
	want := `
# HELP lily_dlq_refused_total Dead letters stored in the catalog only because the broker refused their dead-letter copy (the DLQ is full, or the copy is too large): an operator must act.
# TYPE lily_dlq_refused_total counter
lily_dlq_refused_total{queue="orders"} 2
lily_dlq_refused_total{queue="payments"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), lilyprom.MetricDLQRefused); err != nil {
		t.Error(err)
	}
}

// TestRetriesAtAck checks that each ack observes the retries its message
// had taken, and that no other outcome does.
func TestRetriesAtAck(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, rc := range []int{0, 0, 2, 3} {
		h.Observe(ctx, lily.Event{Kind: lily.EventAcked, Queue: "orders.created", RetryCount: rc, DeliveryCount: 1})
	}
	h.Observe(ctx, lily.Event{Kind: lily.EventRetried, Queue: "orders.created", RetryCount: 9})
	h.Observe(ctx, lily.Event{Kind: lily.EventDeadLettered, Queue: "orders.created", Reason: "permanent"})
	const want = `
# HELP lily_retries_at_ack Framework retries (x-retry-count) a message had taken when its handler succeeded: where successes stop is where retry_attempts belongs.
# TYPE lily_retries_at_ack histogram
lily_retries_at_ack_bucket{queue="orders.created",le="0"} 2
lily_retries_at_ack_bucket{queue="orders.created",le="1"} 2
lily_retries_at_ack_bucket{queue="orders.created",le="2"} 3
lily_retries_at_ack_bucket{queue="orders.created",le="3"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="4"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="5"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="8"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="10"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="15"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="20"} 4
lily_retries_at_ack_bucket{queue="orders.created",le="+Inf"} 4
lily_retries_at_ack_sum{queue="orders.created"} 5
lily_retries_at_ack_count{queue="orders.created"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), lilyprom.MetricRetriesAtAck); err != nil {
		t.Error(err)
	}
}
