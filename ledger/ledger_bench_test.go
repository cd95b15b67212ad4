package ledger

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// streamBroker hands out an endless stream of first deliveries, batch by
// batch, with event IDs s0, s1, …
type streamBroker struct {
	next int
}

func (*streamBroker) Publish(context.Context, *transport.PublishParams) error { return nil }
func (b *streamBroker) Receive(_ context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	ds := make([]*transport.Delivery, p.Max)
	for i := range ds {
		ds[i] = &transport.Delivery{Queue: p.Queue, DeliveryCount: 1,
			Message: transport.Message{EventID: "s" + strconv.Itoa(b.next), Body: []byte(`{"order":` + strconv.Itoa(b.next) + `}`)}}
		b.next++
	}
	return ds, nil
}
func (*streamBroker) Settle(context.Context, *transport.SettleParams) error { return nil }
func (*streamBroker) Close() error                                          { return nil }

// BenchmarkLedgerSteadyStream measures the bounded ledger (docs/ledger.md,
// docs/benchmarks.md "Bounded ledger"): b.N messages, each
// received (counted accepted) and acked through Accounted against a real
// SQLite catalog file, in batches of 100, while a simulated clock advances
// at LEDGER_BENCH_RATE messages per second (default 1000) with a horizon
// of LEDGER_BENCH_HORIZON (default 60s) and automatic pruning every 10000
// events (in the background, as in production: the peak includes its
// lag). It reports the most per-event rows held after any batch, the rows
// at the end, the bound horizon × rate (one row per message) and the
// database's size. LEDGER_BENCH_NOPRUNE=1 disables pruning, for
// comparison. Run it as
//
//	go test ./catalog/ -run '^$' -bench LedgerSteadyStream -benchtime 1000000x
func BenchmarkLedgerSteadyStream(b *testing.B) {
	ctx := context.Background()
	rate := 1000
	if v := os.Getenv("LEDGER_BENCH_RATE"); v != "" {
		var err error
		if rate, err = strconv.Atoi(v); err != nil || rate < 1 {
			b.Fatalf("LEDGER_BENCH_RATE=%q: want a positive integer (messages per simulated second)", v)
		}
	}
	horizon := time.Minute
	if v := os.Getenv("LEDGER_BENCH_HORIZON"); v != "" {
		var err error
		if horizon, err = time.ParseDuration(v); err != nil || horizon <= 0 {
			b.Fatalf("LEDGER_BENCH_HORIZON=%q: want a positive duration such as 60s", v)
		}
	}
	s, err := catalog.Open(ctx, b.TempDir()+"/ledger.db")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := New(s)
	if err := l.SetHorizon(horizon); err != nil {
		b.Fatal(err)
	}
	clk := &clock{now: testNow}
	o := AccountOptions{Now: clk.Now}
	pruning := os.Getenv("LEDGER_BENCH_NOPRUNE") != "1"
	if !pruning {
		o.PruneEvery = -1 // the unbounded ledger, for comparison
	}
	a := AccountWith(&streamBroker{}, l, o)
	const batch = 100
	perMessage := time.Second / time.Duration(rate)
	var maxRows int64
	rows := func() int64 {
		var n int64
		if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_ledger_events`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	// The rows held after each batch: one per message recorded (its
	// accepted row, turned acked), less what was pruned (a one-row sum;
	// checked against COUNT(*) at the end).
	held := func(done int) int64 {
		var pruned int64
		if err := s.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(events), 0) FROM lily_ledger_pruned`).Scan(&pruned); err != nil {
			b.Fatal(err)
		}
		return int64(done) - pruned
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: n, Consumer: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		}
		if err := a.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			b.Fatal(err)
		}
		clk.advance(time.Duration(n) * perMessage)
		done += n
		b.StopTimer()
		maxRows = max(maxRows, held(done))
		b.StartTimer()
	}
	b.StopTimer()
	a.prune.wg.Wait() // the background prune, if one is running
	final := rows()
	if h := held(b.N); h != final {
		b.Errorf("%d rows counted, but %d recorded less %d pruned", final, b.N, int64(b.N)-h)
	}
	if _, err := s.DB().ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	var pages, pageSize int64
	if err := s.DB().QueryRowContext(ctx, `SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&pages, &pageSize); err != nil {
		b.Fatal(err)
	}
	bound := int64(horizon / perMessage)
	ls, err := l.Rows(ctx, nil)
	if err != nil || len(ls) != 1 {
		b.Fatalf("ledger %+v, %v; want one queue", ls, err)
	}
	r := ls[0]
	if r.Accepted != int64(b.N) || r.Acked != int64(b.N) || !r.Balanced() {
		b.Errorf("ledger %+v, want %d accepted and acked, balanced", r, b.N)
	}
	if slack := int64(2 * DefaultPruneEvery); pruning && b.N >= 100000 && maxRows > bound+slack {
		b.Errorf("at most %d per-event rows, want at most horizon × rate (%d) + 2 × PruneEvery (%d: what arrives before and during a prune)", maxRows, bound, slack)
	}
	b.ReportMetric(float64(maxRows), "max-rows")
	b.ReportMetric(float64(final), "final-rows")
	b.ReportMetric(float64(bound), "bound-rows")
	b.ReportMetric(float64(pages*pageSize), "db-bytes")
	b.Logf("%d messages at %d/s simulated (%v), horizon %v: at most %d per-event rows (bound horizon×rate = %d), %d at the end, database %d bytes; ledger accepted %d acked %d lost %d",
		b.N, rate, time.Duration(b.N)*perMessage, horizon, maxRows, bound, final, pages*pageSize, r.Accepted, r.Acked, r.Lost)
}
