package ingest

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// fakeDLQ is a broker DLQ: DrainDeadLetters hands its dead letters to
// store and removes them when store accepts them; err fails the drain.
type fakeDLQ struct {
	waiting []*transport.Delivery
	err     error
	drains  int
}

func (f *fakeDLQ) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	f.drains++
	if f.err != nil {
		return 0, f.err
	}
	if len(f.waiting) == 0 {
		return 0, nil
	}
	if err := store(ctx, f.waiting); err != nil {
		return 0, err
	}
	n := len(f.waiting)
	f.waiting = nil
	return n, nil
}

// newCatalog creates an empty catalog in a SQLite file.
func newCatalog(t *testing.T) *catalog.Store {
	t.Helper()
	cat, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func newTestLoop(t *testing.T, cat *catalog.Store, dlq *fakeDLQ) (*Loop, *prometheus.Registry, *transporttest.SyncBuffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := lilyprom.NewIngestMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	var log transporttest.SyncBuffer
	l, err := New(Options{Catalog: cat, Sources: map[string]Source{"orders": {Drainer: dlq}},
		Interval: time.Second, LeaseTTL: time.Minute, Metrics: m, Hook: hook, Now: time.Now,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return l, reg, &log
}

// TestIngestLoopPasses drives two replicas' loops pass by pass on one
// catalog: only the lease holder drains; failures are counted every pass
// and warned about once; broker-made dead letters are counted in the
// inflow once.
func TestIngestLoopPasses(t *testing.T) {
	cat := newCatalog(t)
	ctx := context.Background()
	dlq := &fakeDLQ{}
	a, regA, logA := newTestLoop(t, cat, dlq)
	b, _, logB := newTestLoop(t, cat, dlq)
	sa, sb := &queueState{}, &queueState{}
	a.pass(ctx, "orders", sa)
	b.pass(ctx, "orders", sb)
	if sa.lease != leaseHeld || sb.lease != leaseOther || dlq.drains != 1 {
		t.Fatalf("lease a=%v b=%v, drains %d: want a holding and draining alone", sa.lease, sb.lease, dlq.drains)
	}
	if !strings.Contains(logB.String(), "lease held by another replica") {
		t.Errorf("b's log: %s", logB.String())
	}
	dlq.waiting = []*transport.Delivery{
		{Queue: "orders", Message: transport.Message{EventID: "e1", Body: []byte("1"),
			Headers: transport.Headers{"x-death": []any{map[string]any{"reason": "delivery_limit", "queue": "orders", "count": int64(2)}}}}},
		{Queue: "orders", Message: transport.Message{EventID: "e2", Body: []byte("2")}},
	}
	b.pass(ctx, "orders", sb) // not the holder: does not touch the DLQ
	if len(dlq.waiting) != 2 {
		t.Fatal("the replica without the lease drained")
	}
	a.pass(ctx, "orders", sa)
	if n, distinct := catalogtest.Entries(t, cat, "orders"); n != 2 || distinct != 2 || len(dlq.waiting) != 0 {
		t.Fatalf("entries %d (%d distinct), waiting %d; want the 2 dead letters moved", n, distinct, len(dlq.waiting))
	}
	dlq.err = errors.New("connection refused")
	for range 3 {
		a.pass(ctx, "orders", sa)
	}
	if n := strings.Count(logA.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for 3 failing passes with one error, want 1:\n%s", n, logA.String())
	}
	dlq.err = nil
	a.pass(ctx, "orders", sa)
	if !strings.Contains(logA.String(), "ingest: working again") {
		t.Errorf("no recovery line:\n%s", logA.String())
	}
	want := `
# HELP lily_ingest_errors_total Ingest passes of this process that failed (broker or catalog error; the dead letters stay in the broker).
# TYPE lily_ingest_errors_total counter
lily_ingest_errors_total{queue="orders"} 3
# HELP lily_ingest_lease_held 1 while this process holds the queue's ingest lease (it is the replica draining the queue's broker DLQ), else 0.
# TYPE lily_ingest_lease_held gauge
lily_ingest_lease_held{queue="orders"} 1
# HELP lily_ingest_total Dead letters this process drained from the queue's broker DLQ into the catalog (committed, then removed from the broker).
# TYPE lily_ingest_total counter
lily_ingest_total{queue="orders"} 2
`
	if err := testutil.GatherAndCompare(regA, strings.NewReader(want), lilyprom.MetricIngestErrors, lilyprom.MetricIngestLeaseHeld, lilyprom.MetricIngested); err != nil {
		t.Error(err)
	}
	// One of the two was made by the broker (x-death, no Lily evidence).
	if got := inflowOf(t, regA, "orders", "delivery_limit"); got != 1 {
		t.Errorf("inflow delivery_limit = %g, want 1", got)
	}
	// a stops: it releases the lease and b takes over at its next pass.
	a.release(ctx, "orders")
	b.pass(ctx, "orders", sb)
	if sb.lease != leaseHeld || catalogtest.LeaseHolder(t, cat, LeasePrefix+"orders") != b.holder {
		t.Errorf("after a released, b's lease state %v, holder %q", sb.lease, catalogtest.LeaseHolder(t, cat, LeasePrefix+"orders"))
	}
}

// inflowOf returns the value of lily_dlq_inflow_total{queue,reason}.
func inflowOf(t *testing.T, reg *prometheus.Registry, queue, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != lilyprom.MetricDLQInflow {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[lilyprom.LabelQueue] == queue && labels[lilyprom.LabelReason] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{queue=%q,reason=%q}", lilyprom.MetricDLQInflow, queue, reason)
	return 0
}
