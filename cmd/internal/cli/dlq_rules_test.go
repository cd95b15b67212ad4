package cli

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/redrive/rules"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// rulesConfig has a breaker rule and a consumer-version rule on
// orders.created; extra is appended (e.g. catalog_url).
func rulesConfig(t *testing.T, extra string) string {
	return writeConfig(t, extra+`
[[queue]]
name = "orders.created"
transport = "sqlite"
retry_attempts = 2

[[redrive_rule]]
name = "after-outage"
queue = "orders.created"
when = "breaker_closed"
lookback = "1m"
sample = 0
rate = 0

[[redrive_rule]]
name = "timeout-fix"
queue = "orders.created"
when = "consumer_version"
reason = "delivery_limit"
fingerprint = "deadbeef"
min_consumer_version = "2.0.0"
`)
}

// recordOutage writes, as a consumer's RuntimeRecorder does, a breaker of
// orders.created that opened at opened and closed at closed.
func recordOutage(t *testing.T, where string, opened, closed time.Time) {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.Open(ctx, where)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	at := opened
	rec := rules.NewRuntimeRecorder(cat, rules.RecorderParams{Consumer: "worker-1", Now: func() time.Time { return at }})
	rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: dlqQueue, Breaker: lily.BreakerOpen})
	at = closed
	rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: dlqQueue, Breaker: lily.BreakerHalfOpen})
	rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: dlqQueue, Breaker: lily.BreakerClosed})
}

func TestDLQRulesDryRun(t *testing.T) {
	t.Parallel()
	eachCatalog(t, func(t *testing.T, where []string) {
		cfg := rulesConfig(t, "")
		now := time.Now()
		recordOutage(t, where[1], now.Add(-10*time.Minute), now.Add(time.Minute))
		code, out, errOut := run(t, append([]string{"dlq", "rules", "--config", cfg, "--dry-run", "--json"}, where...)...)
		if code != 0 {
			t.Fatalf("rules: %d %s", code, errOut)
		}
		var got rulesJSON
		mustJSON(t, out, &got)
		if !got.DryRun || len(got.Rules) != 2 || len(got.Plans) != 2 || len(got.Firings) != 0 {
			t.Fatalf("rules JSON: %s", out)
		}
		p := got.Plans[0]
		// Only the two retries_exhausted entries of the window: never the
		// permanent nor the delivery_limit ones.
		if p.Rule != "after-outage" || !strings.HasPrefix(p.Occurrence, "breaker:") || p.Fired || p.Selected != 2 ||
			!strings.Contains(p.Selector, `"reason":"retries_exhausted"`) {
			t.Errorf("breaker plan: %+v", p)
		}
		if q := got.Plans[1]; q.Rule != "timeout-fix" || q.Occurrence != "" || !strings.Contains(q.Trigger, "no consumer of version >= 2.0.0") {
			t.Errorf("version plan: %+v", q)
		}
		code, out, _ = run(t, append([]string{"dlq", "rules", "--config", cfg, "--dry-run"}, where...)...)
		for _, want := range []string{"rule after-outage: when breaker_closed on orders.created, redrive reason retries_exhausted",
			"would fire for breaker:", "would redrive 2 pending entries", "rule timeout-fix", "would do nothing now", "dry run: nothing changed"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("rules text lacks %q:\n%s", want, out)
			}
		}
		// Nothing changed: no firing, no job, no audit record.
		code, out, _ = run(t, append([]string{"audit", "--json"}, where...)...)
		if code != 0 || !strings.Contains(out, `"count": 0`) {
			t.Errorf("the dry run wrote to the audit log: %s", out)
		}
		code, out, _ = run(t, append([]string{"dlq", "jobs", "--json"}, where...)...)
		if code != 0 || strings.Contains(out, `"id"`) {
			t.Errorf("the dry run made a job: %s", out)
		}
	})
}

// TestServeFiresRuleOnce: two 'lily serve' replicas on one catalog; a
// breaker of orders.created closes after an outage; the rule fires once,
// its dry run is audited, and the job redrives exactly the outage's
// retries_exhausted entries into the queue — nothing permanent, nothing
// crash-type. The queue is then consumed and acked: reconcile balances.
func TestServeFiresRuleOnce(t *testing.T) {
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	db := seedDLQ(t)
	cfg := rulesConfig(t, fmt.Sprintf("db = %q\n", db))
	now := time.Now()
	recordOutage(t, db, now.Add(-10*time.Minute), now.Add(time.Second))
	var passes [2]atomic.Int64 // each replica's rule-loop passes
	for i := range passes {
		signals := &testSignals{rulePass: func() { passes[i].Add(1) }}
		startServeIn(t, withTestSignals(context.Background(), signals), "--config", cfg, "--listen", "127.0.0.1:0", "--rules-interval", "20ms", "--no-ingest")
	}
	ctx := context.Background()
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var job *redrive.Job
	waittest.Poller{Limit: time.Minute}.For(t, "a rule job to end", func() (bool, string) {
		js, err := redrive.New(cat).Jobs(ctx, redrive.JobQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) > 0 && !js[0].State.Active() {
			job = js[0]
			return true, ""
		}
		return false, fmt.Sprintf("jobs %+v", js)
	})
	// Both replicas look again after the job ended: of the passes a
	// replica ends from now on, the second began after the first ended,
	// so after the job had. Had the rule fired again for this outage, it
	// would have by then.
	seen := [2]int64{passes[0].Load(), passes[1].Load()}
	waittest.ForState(t, "two more rule passes of each replica", func() (bool, string) {
		a, b := passes[0].Load(), passes[1].Load()
		return a >= seen[0]+2 && b >= seen[1]+2, fmt.Sprintf("passes %d and %d, from %d and %d", a, b, seen[0], seen[1])
	})
	js, _ := redrive.New(cat).Jobs(ctx, redrive.JobQuery{})
	fs, _ := rules.New(cat).Firings(ctx, "")
	if len(js) != 1 || len(fs) != 1 || fs[0].JobID != job.ID {
		t.Fatalf("jobs %d, firings %+v: want one of each", len(js), fs)
	}
	if job.State != redrive.JobDone || job.Sent != 2 || job.Actor != "rule:after-outage" {
		t.Fatalf("job %+v", job)
	}
	states := map[string]catalog.State{}
	if err := cat.Each(ctx, catalog.Filter{}, func(e *catalog.Entry) error { states[e.EventID] = e.State; return nil }); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]catalog.State{"evt-1": "pending", "evt-2": "pending", "evt-3": "pending", "evt-4": "redriven", "evt-5": "redriven", "evt-6": "pending"} {
		if states[id] != want {
			t.Errorf("%s is %s, want %s", id, states[id], want)
		}
	}
	dry := 0
	if err := cat.EachAudit(ctx, catalog.AuditFilter{Op: job.Op}, func(r *catalog.AuditRecord) error {
		if r.DryRun && r.Outcome == catalog.OutcomeWouldRedrive {
			dry += r.Count
		}
		return nil
	}); err != nil || dry != 2 {
		t.Fatalf("dry run audited %d entries, %v", dry, err)
	}
	// The two redriven messages are in the queue: consume and ack them.
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: dlqQueue, Max: 10, Consumer: "fixed"})
	if err != nil || len(ds) != 2 {
		t.Fatalf("queue holds %d messages, %v; want the 2 redriven", len(ds), err)
	}
	var ss []transport.Settlement
	for _, d := range ds {
		if d.Message.EventID != "evt-4" && d.Message.EventID != "evt-5" {
			t.Errorf("redriven %s", d.Message.EventID)
		}
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "reconcile", "--config", cfg); code != 0 {
		t.Fatalf("reconcile: %d %s %s", code, out, errOut)
	}
}
