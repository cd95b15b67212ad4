package lilyprom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// entry builds a catalog entry of queue in state st, dead-lettered age ago.
func entry(queue, id string, st catalog.State, age time.Duration) *catalog.Entry {
	e := catalog.NewEntry(queue, transport.Message{EventID: id, Body: []byte(`{"id":"` + id + `"}`)},
		transport.Headers{}, "permanent", testNow.Add(-age))
	e.State = st
	return e
}

// addCounts adds to a queue's ledger counters, as a transport does.
func addCounts(t *testing.T, s *catalog.Store, queue string, accepted, acked int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := catalogdb.AddCountsTx(ctx, tx, queue, accepted, acked); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// inflight is an InFlightCounter stub.
type inflight map[string]int64

func (c inflight) InFlight(_ context.Context, q string) (int64, error) { return c[q], nil }

// TestCatalogCollector checks every gauge against a catalog with known
// entries in every state, a ledger, and a configured queue with nothing.
func TestCatalogCollector(t *testing.T) {
	s := transporttest.TempCatalog(t)
	h := time.Hour
	err := s.Insert(context.Background(),
		entry("orders.created", "o1", catalog.StatePending, 1*h),
		entry("orders.created", "o2", catalog.StatePending, 2*h),
		entry("orders.created", "o3", catalog.StatePending, 5*h),
		entry("orders.created", "o4", catalog.StateParked, 10*h), // the oldest held
		entry("orders.created", "o5", catalog.StateNeedsManual, 3*h),
		entry("orders.created", "o6", catalog.StateRedriven, 20*h), // older, but not held
		entry("orders.created", "o7", catalog.StateRedriven, 30*h),
		entry("orders.created", "o8", catalog.StateDiscarded, 40*h),
		entry("orders.created", "o9", catalog.StateErased, 50*h),
		entry("payments.captured", "p1", catalog.StatePending, 30*time.Minute),
		entry("payments.captured", "p2", catalog.StateDiscarded, 90*h),
	)
	if err != nil {
		t.Fatal(err)
	}
	// orders: 20 accepted − 10 acked − 5 held − 2 discarded/erased − 2 in
	// flight = 1 unaccounted. payments: 5 − 3 − 1 − 1 − 0 = 0.
	addCounts(t, s, "orders.created", 20, 10)
	addCounts(t, s, "payments.captured", 5, 3)
	// payments.captured is paused; orders.created has a live instance
	// and one silent for a minute (stale at a 5 s heartbeat).
	ctx := context.Background()
	if _, err := s.PauseQueue(ctx, "payments.captured", "maintenance", "alice", testNow); err != nil {
		t.Fatal(err)
	}
	for i, seen := range []time.Time{testNow, testNow.Add(-time.Minute)} {
		c := &catalog.Consumer{Instance: fmt.Sprint("i", i), Queue: "orders.created", HeartbeatMillis: 5000, StartedAt: seen, LastSeen: seen}
		if err := s.Heartbeat(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewCatalogCollector(s, inflight{"orders.created": 2}, lilyprom.CatalogOptions{
		Queues:    []string{"orders.created", "refunds.issued"},
		Retention: map[string]time.Duration{"orders.created": 2 * time.Hour, "refunds.issued": 336 * time.Hour},
		Now:       func() time.Time { return testNow },
	}))
	want := `
# HELP lily_dlq_alarming_entries Held dead-letter entries (pending, parked, needs_manual) not triaged known_issue (their own status, else their group's): what LilyDLQNotEmpty alarms on.
# TYPE lily_dlq_alarming_entries gauge
lily_dlq_alarming_entries{queue="orders.created"} 5
lily_dlq_alarming_entries{queue="payments.captured"} 1
lily_dlq_alarming_entries{queue="refunds.issued"} 0
# HELP lily_dlq_entries Dead-letter catalog entries by state (pending, parked and needs_manual are the held work list).
# TYPE lily_dlq_entries gauge
lily_dlq_entries{queue="orders.created",state="discarded"} 1
lily_dlq_entries{queue="orders.created",state="erased"} 1
lily_dlq_entries{queue="orders.created",state="needs_manual"} 1
lily_dlq_entries{queue="orders.created",state="parked"} 1
lily_dlq_entries{queue="orders.created",state="pending"} 3
lily_dlq_entries{queue="orders.created",state="redriven"} 2
lily_dlq_entries{queue="payments.captured",state="discarded"} 1
lily_dlq_entries{queue="payments.captured",state="erased"} 0
lily_dlq_entries{queue="payments.captured",state="needs_manual"} 0
lily_dlq_entries{queue="payments.captured",state="parked"} 0
lily_dlq_entries{queue="payments.captured",state="pending"} 1
lily_dlq_entries{queue="payments.captured",state="redriven"} 0
lily_dlq_entries{queue="refunds.issued",state="discarded"} 0
lily_dlq_entries{queue="refunds.issued",state="erased"} 0
lily_dlq_entries{queue="refunds.issued",state="needs_manual"} 0
lily_dlq_entries{queue="refunds.issued",state="parked"} 0
lily_dlq_entries{queue="refunds.issued",state="pending"} 0
lily_dlq_entries{queue="refunds.issued",state="redriven"} 0
# HELP lily_dlq_oldest_entry_age_seconds Age in seconds of the oldest held entry (pending, parked, needs_manual) since it was dead-lettered; 0 when none.
# TYPE lily_dlq_oldest_entry_age_seconds gauge
lily_dlq_oldest_entry_age_seconds{queue="orders.created"} 36000
lily_dlq_oldest_entry_age_seconds{queue="payments.captured"} 1800
lily_dlq_oldest_entry_age_seconds{queue="refunds.issued"} 0
# HELP lily_dlq_retention_seconds The queue's dlq_retention_hours in seconds: the deadline of lily_dlq_oldest_entry_age_seconds.
# TYPE lily_dlq_retention_seconds gauge
lily_dlq_retention_seconds{queue="orders.created"} 7200
lily_dlq_retention_seconds{queue="refunds.issued"} 1.2096e+06
# HELP lily_held_keys Keys held by ordering park or block: their later messages wait behind a dead-lettered head ('lily dlq parked').
# TYPE lily_held_keys gauge
lily_held_keys{queue="orders.created"} 0
lily_held_keys{queue="payments.captured"} 0
lily_held_keys{queue="refunds.issued"} 0
# HELP lily_ledger_unaccounted Ledger: accepted - acked - dead_lettered - discarded - in_flight ('lily reconcile' lost); positive = messages unaccounted for.
# TYPE lily_ledger_unaccounted gauge
lily_ledger_unaccounted{queue="orders.created"} 1
lily_ledger_unaccounted{queue="payments.captured"} 0
# HELP lily_queue_paused 1 while the queue is paused ('lily queue pause'): its consumers take no messages, its lag grows by choice.
# TYPE lily_queue_paused gauge
lily_queue_paused{queue="orders.created"} 0
lily_queue_paused{queue="payments.captured"} 1
lily_queue_paused{queue="refunds.issued"} 0
# HELP lily_consumer_instances Consumer instances by their heartbeats: live, or stale (silent for 3 heartbeat intervals: a process that died or cannot reach the catalog).
# TYPE lily_consumer_instances gauge
lily_consumer_instances{queue="orders.created",state="live"} 1
lily_consumer_instances{queue="orders.created",state="stale"} 1
lily_consumer_instances{queue="payments.captured",state="live"} 0
lily_consumer_instances{queue="payments.captured",state="stale"} 0
lily_consumer_instances{queue="refunds.issued",state="live"} 0
lily_consumer_instances{queue="refunds.issued",state="stale"} 0
# HELP lily_catalog_up 1 when every catalog query of the scrape succeeded, else 0.
# TYPE lily_catalog_up gauge
lily_catalog_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The same figures as 'lily reconcile'.
	rows, err := ledger.New(s).Rows(context.Background(), inflight{"orders.created": 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Lost != 1 || rows[1].Lost != 0 {
		t.Errorf("ledger = %+v, want orders.created lost 1, payments.captured lost 0", rows)
	}
}

// TestCatalogCollectorWithoutCounter: without an in-flight counter the
// ledger would count in-flight messages as lost, so it is not exported.
func TestCatalogCollectorWithoutCounter(t *testing.T) {
	s := transporttest.TempCatalog(t)
	addCounts(t, s, "orders.created", 10, 4) // 6 in flight: not lost
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewCatalogCollector(s, nil, lilyprom.CatalogOptions{}))
	n, err := testutil.GatherAndCount(reg, lilyprom.MetricLedgerUnaccounted)
	if err != nil || n != 0 {
		t.Errorf("%s series = %d (%v), want none without a counter", lilyprom.MetricLedgerUnaccounted, n, err)
	}
	// The ledger's queue is exported all the same, at zero.
	if n, err := testutil.GatherAndCount(reg, lilyprom.MetricDLQEntries); err != nil || n != 6 {
		t.Errorf("%s series = %d (%v), want the 6 states of orders.created", lilyprom.MetricDLQEntries, n, err)
	}
}

// TestCatalogCollectorUnreadable: a catalog that cannot be read reports
// lily_catalog_up 0 and the error, and the handler still serves the rest.
func TestCatalogCollectorUnreadable(t *testing.T) {
	s := transporttest.TempCatalog(t)
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	hook.Init("orders.created")
	reg.MustRegister(lilyprom.NewCatalogCollector(s, nil, lilyprom.CatalogOptions{}))
	s.Close()
	mfs, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "read the catalog") {
		t.Errorf("Gather error = %v, want the catalog's", err)
	}
	up := -1.0
	for _, mf := range mfs {
		if mf.GetName() == lilyprom.MetricCatalogUp {
			up = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if up != 0 {
		t.Errorf("%s = %v, want 0", lilyprom.MetricCatalogUp, up)
	}
	rec := serve(t, reg)
	if !strings.Contains(rec, "lily_catalog_up 0") || !strings.Contains(rec, `lily_messages_total{outcome="acked",queue="orders.created"} 0`) {
		t.Errorf("/metrics without the runtime metrics or lily_catalog_up 0:\n%s", rec)
	}
}

// TestCatalogCardinality: hundreds of entries with distinct event IDs,
// reasons and error types make one series per queue and state.
func TestCatalogCardinality(t *testing.T) {
	s := transporttest.TempCatalog(t)
	var es []*catalog.Entry
	states := []catalog.State{catalog.StatePending, catalog.StateRedriven, catalog.StateDiscarded}
	for i := range 300 {
		e := entry(fmt.Sprintf("q%d", i%3), fmt.Sprintf("evt-%05d", i), states[i%len(states)], time.Duration(i)*time.Second)
		e.Reason, e.ErrorType, e.ErrorMessage = fmt.Sprintf("r%d", i), fmt.Sprintf("*e%d", i), fmt.Sprintf("m%d", i)
		es = append(es, e)
	}
	if err := s.Insert(context.Background(), es...); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewCatalogCollector(s, inflight{}, lilyprom.CatalogOptions{}))
	// 3 queues × 6 states; 3 ages; 3 held-key counts; 3 alarming counts;
	// 3 ledger rows (the queues of the entries); 3 paused flags and 3 × 2
	// consumer instance counts (live, stale); up.
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3*6+3+3+3+3+3+3*2+1 {
		t.Errorf("series = %d (%v), want %d", n, err, 3*6+3+3+3+3+3+3*2+1)
	}
}

// BenchmarkCatalogCollect measures one scrape of a catalog of 200,000
// entries in 4 queues, most of them decided long ago.
func BenchmarkCatalogCollect(b *testing.B) {
	s := transporttest.TempCatalog(b)
	fill(b, s)
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewCatalogCollector(s, inflight{}, lilyprom.CatalogOptions{}))
	b.ResetTimer()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// fill adds 200,000 entries in 4 queues, 95% of them discarded.
func fill(b *testing.B, s *catalog.Store) {
	const n = 200_000
	batch := make([]*catalog.Entry, 0, 10_000)
	for i := range n {
		st := catalog.StateDiscarded
		if i >= n*95/100 {
			st = catalog.StatePending
		}
		batch = append(batch, entry(fmt.Sprintf("q%d", i%4), fmt.Sprintf("e%d", i), st, time.Duration(n-i)*time.Second))
		if len(batch) == cap(batch) {
			if err := s.Insert(context.Background(), batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// serve fetches /metrics from lilyprom.Handler(g).
func serve(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	lilyprom.Handler(g).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /metrics: status %d", rec.Code)
	}
	return rec.Body.String()
}

// TestCatalogHeldKeys: a parked key shows in lily_held_keys.
func TestCatalogHeldKeys(t *testing.T) {
	s := transporttest.TempCatalog(t)
	ctx := context.Background()
	for _, k := range []string{"acct-1", "acct-2"} {
		if err := redrive.NewKeys(s).HoldKey(ctx, "ledger.postings", k, redrive.KeyModePark, redrive.KeyHeld, "head-"+k); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewCatalogCollector(s, nil, lilyprom.CatalogOptions{Queues: []string{"other"}}))
	want := `# HELP lily_held_keys Keys held by ordering park or block: their later messages wait behind a dead-lettered head ('lily dlq parked').
# TYPE lily_held_keys gauge
lily_held_keys{queue="ledger.postings"} 2
lily_held_keys{queue="other"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), lilyprom.MetricHeldKeys); err != nil {
		t.Error(err)
	}
}
