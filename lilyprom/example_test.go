package lilyprom_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// Example runs a consumer on the embedded SQLite transport with the
// metrics Hook attached, registers the catalog collector beside it and
// serves both at /metrics, as a long-running process would.
func Example() {
	dir, err := os.MkdirTemp("", "lilyprom-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := sqlite.Open(ctx, filepath.Join(dir, "lily.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	q := lily.QueueConfig{Name: "orders.created", Owner: "team-checkout"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		fmt.Println(err)
		return
	}
	err = lily.Publish(ctx, tr, q.Name, []lily.Message{
		{EventID: "order-1", Body: []byte(`{"id":1}`)},
		{EventID: "order-2", Body: []byte(`{"id":`)},
		{EventID: "order-3", Body: []byte(`{"id":3}`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The runtime metrics: one Hook for every consumer of the process.
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The work list and the ledger, read at each scrape.
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		fmt.Println(err)
		return
	}
	reg.MustRegister(lilyprom.NewCatalogCollector(cat, tr, lilyprom.CatalogOptions{Queues: []string{q.Name}}))

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var settled atomic.Int64
	untilSettled := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventAcked || e.Kind == lily.EventDeadLettered {
			if settled.Add(1) == 3 {
				stop()
			}
		}
	})
	handler := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if !strings.HasSuffix(string(d.Body), "}") {
			return lily.Permanent(errors.New("decode order: truncated body"))
		}
		return nil
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{
		Queue:  q,
		Hooks:  []lily.Hook{hook, untilSettled},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Run(runCtx); err != nil {
		fmt.Println(err)
		return
	}

	// Serve /metrics (here through httptest; in a server: http.Handle).
	srv := httptest.NewServer(lilyprom.Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	show := []string{
		`lily_messages_total{outcome="acked"`,
		`lily_messages_total{outcome="dead_lettered"`,
		`lily_dlq_inflow_total{queue="orders.created",reason="permanent"}`,
		`lily_dlq_entries{queue="orders.created",state="pending"}`,
		`lily_ledger_unaccounted`,
		`lily_breaker_state`,
		`lily_catalog_up`,
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, p := range show {
			if strings.HasPrefix(sc.Text(), p) {
				fmt.Println(sc.Text())
			}
		}
	}

	// Output:
	// lily_breaker_state{queue="orders.created"} 0
	// lily_catalog_up 1
	// lily_dlq_entries{queue="orders.created",state="pending"} 1
	// lily_dlq_inflow_total{queue="orders.created",reason="permanent"} 1
	// lily_ledger_unaccounted{queue="orders.created"} 0
	// lily_messages_total{outcome="acked",queue="orders.created"} 2
	// lily_messages_total{outcome="dead_lettered",queue="orders.created"} 1
}

// ExampleHook_Redrive counts the outcomes of a redrive, as the redrive
// code reports them entry by entry.
func ExampleHook_Redrive() {
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	var obs lilyprom.RedriveObserver = hook
	obs.Redrive("orders.created", lilyprom.RedriveRedriven)
	obs.Redrive("orders.created", lilyprom.RedriveRedriven)
	obs.Redrive("orders.created", lilyprom.RedriveNeedsManual)
	obs.Redrive("orders.created", "would_redrive") // a dry run: not counted

	mfs, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		if mf.GetName() != lilyprom.MetricRedrive {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Printf("%s{queue=%q,outcome=%q} %v\n", mf.GetName(), label(m, "queue"), label(m, "outcome"), m.GetCounter().GetValue())
		}
	}
	// Output:
	// lily_redrive_total{queue="orders.created",outcome="failed"} 0
	// lily_redrive_total{queue="orders.created",outcome="needs_manual"} 1
	// lily_redrive_total{queue="orders.created",outcome="redriven"} 2
}
