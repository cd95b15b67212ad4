package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

const quarantine = "orders.quarantine"

// ackOn consumes queue of the SQLite store db and acks everything, as a
// fixed consumer would; it returns what it acked so far.
func ackOn(t *testing.T, db, queue string) func() []*transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tr, err := sqlite.Open(ctx, db, sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []*transport.Delivery
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 10, Consumer: "fixed", Wait: 20 * time.Millisecond})
			if err != nil {
				return
			}
			var ss []transport.Settlement
			for _, d := range ds {
				ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			if len(ss) > 0 && tr.Settle(ctx, &transport.SettleParams{Settlements: ss}) == nil {
				mu.Lock()
				got = append(got, ds...)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		tr.Close()
	})
	return func() []*transport.Delivery {
		mu.Lock()
		defer mu.Unlock()
		return append([]*transport.Delivery(nil), got...)
	}
}

// A redrive --to on the SQLite transport: refused with nothing changed for
// a queue that does not exist or is not configured; a dry run names both
// queues; the sampled, rated job sends to the quarantine queue, whose
// consumer acks; the audit names both queues; the ledger of both queues
// balances (the source counts the entries redirected, the target accepted
// and acked).
func TestDLQRedirectSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := seedDLQ(t)
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: quarantine}}}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\n[[queue]]\nname = %q\n", db, dlqQueue, quarantine))

	// Refusals: not configured, not declared. Nothing changes.
	if code, _, errOut := run(t, "dlq", "redrive", "--config", cfg, "--to", "orders.nowhere", "--reason", "permanent"); code != 2 ||
		!strings.Contains(errOut, `--to "orders.nowhere": not a [[queue]] of --config`) {
		t.Errorf("redirect to an unconfigured queue: %d %s", code, errOut)
	}
	for _, dry := range []string{"--dry-run", "--rate=0"} {
		if code, _, errOut := run(t, "dlq", "redrive", "--db", db, "--to", "orders.nowhere", "--reason", "permanent", dry); code != 1 ||
			!strings.Contains(errOut, `queue "orders.nowhere" no longer exists`) || !strings.Contains(errOut, "nothing was sent or changed") {
			t.Errorf("redirect (%s) to a queue the store lacks: %d %s", dry, code, errOut)
		}
	}
	if st := entryStates(t, db); st["pending"] != 6 {
		t.Fatalf("states after the refusals: %v", st)
	}

	// Dry run: what would go where.
	code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--to", quarantine, "--reason", "permanent", "--dry-run")
	if code != 0 || strings.Count(out, "would redirect to "+quarantine+" (source "+dlqQueue+")") != 3 {
		t.Errorf("dry run: %d %s %s", code, out, errOut)
	}

	// The redrive: a sample of 1 acked on the quarantine queue, the rest at a rate.
	acked := ackOn(t, db, quarantine)
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--to", quarantine, "--reason", "permanent",
		"--sample", "1", "--observe", "1m", "--rate", "100", "--actor", "alice", "--json")
	if code != 0 {
		t.Fatalf("redirect: %d %s %s", code, out, errOut)
	}
	var res redriveJSON
	mustJSON(t, out, &res)
	if res.Redriven != 3 || res.To != quarantine || res.Sample == nil || !res.Sample.Clean || res.Job == 0 {
		t.Errorf("redirect JSON %+v", res)
	}
	ds := waitReceived(t, acked, 3)
	if len(ds) != 3 {
		t.Fatalf("the quarantine consumer acked %d, want 3", len(ds))
	}
	for i, d := range ds {
		if d.EventID != fmt.Sprintf("evt-%d", i+1) || d.Headers[evidence.HeaderRedriveCount] != int32(1) || d.Headers["source-system"] != "shop-web" {
			t.Errorf("redirected message %s: headers %v", d.EventID, d.Headers)
		}
	}
	// Nothing went to the source queue.
	if code, out, _ := run(t, "dlq", "jobs", "--db", db, "--json"); code != 0 || !strings.Contains(out, `"to": "`+quarantine+`"`) {
		t.Errorf("jobs: %d %s", code, out)
	}
	var rec reconcileJSON
	code, out, errOut = run(t, "reconcile", "--db", db, "--json")
	mustJSON(t, out, &rec)
	if code != 0 || !rec.Balanced || len(rec.Queues) != 2 {
		t.Fatalf("reconcile: %d %s %s", code, out, errOut)
	}
	for _, r := range rec.Queues {
		switch r.Queue {
		case dlqQueue:
			if r.Accepted != 6 || r.Redirected != 3 || r.DeadLettered != 3 || r.InFlight != 0 {
				t.Errorf("source ledger %+v", r)
			}
		case quarantine:
			if r.Accepted != 3 || r.Acked != 3 || r.InFlight != 0 {
				t.Errorf("quarantine ledger %+v", r)
			}
		}
	}
	// The audit names both queues on every batch.
	cat := openCatalog(t, db)
	n := 0
	err = cat.EachAudit(ctx, catalog.AuditFilter{Action: catalog.ActionRedrive}, func(r *catalog.AuditRecord) error {
		switch r.Outcome {
		case catalog.OutcomeRedriven:
			n += r.Count
			if r.Detail != "sent to "+quarantine+" instead of its source "+dlqQueue+" (redirected)" || !strings.Contains(r.Selector, `"to":"`+quarantine+`"`) || r.Actor != "alice" {
				t.Errorf("redirect audit record %+v", r)
			}
		case catalog.OutcomeFailed:
			if !strings.Contains(r.Detail, "redirect to orders.nowhere (from "+dlqQueue+")") {
				t.Errorf("refusal audit record %+v", r)
			}
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("audit: %d redirected, %v", n, err)
	}
}

// A redrive --to between RabbitMQ queues (a real broker), with the catalog
// in a SQLite file and in PostgreSQL: the message lands in the target
// queue, none in the source; a deleted target refuses the redrive with
// nothing changed.
func TestDLQRedirectRabbitMQ(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			where := filepath.Join(t.TempDir(), "catalog.db")
			if store == "postgres" {
				where = pgtest.URL(t)
			}
			src := fmt.Sprintf("redirect%08x.created", rand.Uint32())
			dst := src + ".quarantine"
			qs := lily.QueueConfig{Name: src, Transport: lily.TransportRabbitMQ}.WithDefaults()
			qd := lily.QueueConfig{Name: dst, Transport: lily.TransportRabbitMQ}.WithDefaults()
			cleanupRabbitQueues(t, url, qs)
			cleanupRabbitQueues(t, url, qd)
			rmq, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			defer rmq.Close()
			if err := rmq.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qs.Spec(), qd.Spec()}}); err != nil {
				t.Fatal(err)
			}
			cat, err := catalog.Open(ctx, where)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				h := transport.Headers{"x-death": []any{map[string]any{"reason": "rejected", "queue": src, "count": int64(1)}}}
				evidence.Record{Reason: evidence.ReasonPermanent, DeadLetteredAt: time.Now()}.Apply(h)
				e := catalog.NewEntry(src, transport.Message{EventID: fmt.Sprintf("rd-%d", i), Key: "k", Type: "t", Body: []byte(fmt.Sprint(i))}, h, "", time.Now())
				if err := cat.Insert(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			cat.Close()
			loc := fmt.Sprintf("db = %q\n", where)
			if store == "postgres" {
				loc = fmt.Sprintf("catalog_url = %q\n", where)
			}
			cfg := writeConfig(t, fmt.Sprintf("%srabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\n",
				loc, url, src, dst))
			if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", src, "--to", dst, "--dry-run", "--json"); code != 0 ||
				!strings.Contains(out, `"selected": 3`) || !strings.Contains(out, `"to": "`+dst+`"`) {
				t.Errorf("dry run: %d %s %s", code, out, errOut)
			}
			if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", src, "--to", dst, "--limit", "2", "--json"); code != 0 ||
				!strings.Contains(out, `"redriven": 2`) {
				t.Fatalf("redirect: %d %s %s", code, out, errOut)
			}
			in, err := rmq.Peek(ctx, &rabbitmq.PeekParams{Queue: dst})
			if err != nil || len(in) != 2 || in[0].EventID != "rd-1" || in[1].EventID != "rd-2" || evidence.RedriveCount(in[0].Headers) != 1 {
				t.Fatalf("the target queue holds %d (%v): %+v", len(in), err, in)
			}
			// Peek gives back asynchronously: poll the depths.
			waittest.ForState(t, "in flight: 0 in the source, 2 in the target", func() (bool, string) {
				nsrc, serr := rmq.InFlight(ctx, src)
				ndst, derr := rmq.InFlight(ctx, dst)
				return serr == nil && derr == nil && nsrc == 0 && ndst == 2, fmt.Sprintf("source %d (%v), target %d (%v)", nsrc, serr, ndst, derr)
			})
			// The target is deleted: refused, nothing changed.
			if err := rmq.DeleteQueues(ctx, qd.Spec()); err != nil {
				t.Fatal(err)
			}
			if code, _, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", src, "--to", dst); code != 1 ||
				!strings.Contains(errOut, "no longer exists on the broker") || !strings.Contains(errOut, "nothing was sent or changed") {
				t.Errorf("redirect to a deleted queue: %d %s", code, errOut)
			}
			// Every message is accounted for: 2 in the target (redriven
			// entries), 1 entry still pending, nothing in the source.
			cat, err = catalog.Open(ctx, where)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			st, err := cat.CountBy(ctx, "state", catalog.Filter{})
			if err != nil || st["pending"] != 1 || st["redriven"] != 2 || len(st) != 2 {
				t.Errorf("states %v, %v", st, err)
			}
			rows, err := ledger.New(cat).Rows(ctx, nil)
			if err != nil || len(rows) != 1 || rows[0].Redirected != 2 || rows[0].DeadLettered != 1 {
				t.Errorf("ledger rows %+v, %v", rows, err)
			}
		})
	}
}
