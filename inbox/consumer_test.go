package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestConsumerDuplicatesAndRedrive runs a real consumer (SQLite
// transport) whose handler writes through the inbox into the application
// database (each backend). A producer publishes some events twice; some
// handlers fail after their effect committed (a confirmation e-mail that
// cannot be sent), are retried — duplicates — and dead-lettered; after the
// fix they are redriven — duplicates again. Every effect is applied exactly
// once, every duplicate is counted by lilyprom through the consumer's
// hooks, and the ledger balances.
func TestConsumerDuplicatesAndRedrive(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		const (
			n        = 40
			dups     = 7 // republished with the same event ID
			postFail = 5 // fail after the commit until fixed
			retries  = 2
		)
		tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "queue.db"), sqlite.Options{PollInterval: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		qc := lily.QueueConfig{Name: "orders.created", RetryAttempts: retries, RetryBackoffMillis: new(int64(5)),
			MaxRetryBackoffMillis: new(int64(10))}.WithDefaults()
		if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
			t.Fatal(err)
		}
		msgs := make([]lily.Message, n)
		for i := range msgs {
			msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i%3), Body: fmt.Appendf(nil, "order-%d", i)}
		}
		if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
			t.Fatal(err)
		}
		if err := lily.Publish(ctx, tr, qc.Name, append([]lily.Message(nil), msgs[:dups]...)); err != nil {
			t.Fatal(err)
		}
		failing := map[string]bool{}
		for _, m := range msgs[n-postFail:] {
			failing[m.EventID] = true
		}
		var fixed atomic.Bool
		handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
			tx, commit, rollback, err := b.beginE(ctx)
			if err != nil {
				return err
			}
			defer rollback()
			if err := inbox.Once(ctx, tx, d, func() error {
				return exec(ctx, tx, `INSERT INTO effects (event_id, amount) VALUES ($1, 1)`, d.EventID)
			}); err != nil {
				return err
			}
			if err := commit(); err != nil {
				return err
			}
			if failing[d.EventID] && !fixed.Load() {
				return errors.New("send confirmation: smtp 421 try again later")
			}
			return nil
		})
		reg := prometheus.NewRegistry()
		hook, err := lilyprom.NewHook(reg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: qc, Concurrency: 4, Hooks: []lily.Hook{hook},
			ReceiveWait: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		stop := transporttest.Start(t, c)
		cat, err := catalog.New(ctx, tr.DB())
		if err != nil {
			t.Fatal(err)
		}
		dlq := func() int64 {
			m, err := cat.CountBy(ctx, "state", catalog.Filter{Queue: qc.Name})
			if err != nil {
				t.Fatal(err)
			}
			return m[string(catalog.StatePending)]
		}
		quiet := func() bool { f, err := tr.InFlight(ctx, qc.Name); return err == nil && f == 0 }
		transporttest.WaitFor(t, "the first pass", func() bool { return quiet() && dlq() == postFail })
		dupMetric := func() float64 {
			return testutil.ToFloat64(hookCounter(t, reg, lilyprom.MetricInboxDuplicates, qc.Name))
		}
		if got, want := dupMetric(), float64(dups+postFail*retries); got != want {
			t.Fatalf("first pass: %s = %v, want %v", lilyprom.MetricInboxDuplicates, got, want)
		}

		fixed.Store(true)
		res, err := redrive.New(cat).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: qc.Name},
			Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
		if err != nil || res.Redriven != postFail {
			t.Fatalf("redrive: %+v, %v", res, err)
		}
		transporttest.WaitFor(t, "the redriven messages", func() bool {
			return quiet() && dupMetric() == float64(dups+postFail*retries+postFail)
		})
		stop()

		if got := b.count(t, `SELECT COUNT(*) FROM effects`); got != n {
			t.Fatalf("effects = %d, want %d", got, n)
		}
		if got := b.count(t, `SELECT COUNT(DISTINCT event_id) FROM effects`); got != n {
			t.Fatalf("distinct effects = %d, want %d", got, n)
		}
		rows, err := ledger.New(cat).Rows(ctx, tr)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue != qc.Name {
				continue
			}
			if r.Lost != 0 || r.InFlight != 0 || r.Accepted != r.Acked+r.DeadLettered+r.Discarded {
				t.Fatalf("ledger does not balance: %+v", r)
			}
			t.Logf("%s: ledger %+v; %v duplicates absorbed", b.name, r, dupMetric())
			return
		}
		t.Fatalf("no ledger row for %s: %+v", qc.Name, rows)
	})
}

// hookCounter finds the counter of metric for queue in reg.
func hookCounter(t *testing.T, reg *prometheus.Registry, metric, queue string) prometheus.Collector {
	t.Helper()
	return gatheredCounter{reg: reg, metric: metric, queue: queue}
}

// gatheredCounter is a collector reading one series from a registry.
type gatheredCounter struct {
	reg           *prometheus.Registry
	metric, queue string
}

func (g gatheredCounter) Describe(ch chan<- *prometheus.Desc) {}

func (g gatheredCounter) Collect(ch chan<- prometheus.Metric) {
	mfs, err := g.reg.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		if mf.GetName() != g.metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == lilyprom.LabelQueue && l.GetValue() == g.queue {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.metric, "", nil, nil),
						prometheus.CounterValue, m.GetCounter().GetValue())
				}
			}
		}
	}
}
