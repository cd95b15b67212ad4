package redrive_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// dieOn is a publisher through the SQLite transport whose process "dies"
// (runtime.Goexit: no cleanup of the runner beyond the deferred rollbacks a
// crash would also do) at its die-th publish: through PublishTx inside the
// catalog's transaction, or — broker-like, Publish — after the messages
// went out and before the entries were marked.
type dieOn struct {
	tr       *sqlite.Transport
	tx       bool
	die, n   int
	mu       sync.Mutex
	sent     map[string]int
	onPublic func(n int)
}

func (d *dieOn) Publish(ctx context.Context, p *transport.PublishParams) error {
	if err := d.tr.Publish(ctx, p); err != nil {
		return err
	}
	d.mu.Lock()
	d.n++
	for _, m := range p.Messages {
		d.sent[m.EventID]++
	}
	n := d.n
	d.mu.Unlock()
	if d.onPublic != nil {
		d.onPublic(n)
	}
	if n == d.die {
		runtime.Goexit()
	}
	return nil
}

// txDieOn adds PublishTx, so that the redrive publishes in the catalog's
// transaction.
type txDieOn struct{ *dieOn }

func (d txDieOn) DB() *sql.DB { return d.tr.DB() }

func (d txDieOn) PublishTx(ctx context.Context, tx *sql.Tx, p *transport.PublishParams) error {
	d.mu.Lock()
	d.n++
	n := d.n
	d.mu.Unlock()
	if n == d.die {
		runtime.Goexit() // inside the transaction: it rolls back
	}
	return d.tr.PublishTx(ctx, tx, p)
}

// runDies runs the job in a goroutine that dies in its publisher, and waits
// for it.
func runDies(t *testing.T, cat *catalog.Store, j *redrive.Job, p redrive.JobRunParams) {
	t.Helper()
	done := make(chan struct{})
	finished := false
	go func() {
		defer close(done)
		_, _ = redrive.New(cat).RunJob(context.Background(), j, p)
		finished = true
	}()
	<-done
	if finished {
		t.Fatal("the runner finished the job instead of dying")
	}
}

// later is a clock an hour ahead: every lease taken with the real clock
// has run out.
func later() time.Time { return time.Now().Add(time.Hour) }

func TestJobSurvivesItsRunner(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(map[bool]string{false: "broker-like publish", true: "publish in the catalog transaction"}[tx], func(t *testing.T) {
			ctx := context.Background()
			tr, cat := deadLettered(t, "orders", 10)
			d := &dieOn{tr: tr, tx: tx, die: 3, sent: map[string]int{}}
			var pub redrive.Publisher = d
			if tx {
				pub = txDieOn{d}
			}
			target := func(context.Context, string) (redrive.Publisher, error) { return pub, nil }
			j, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders"}, Rate: 1000, Actor: "t", Holder: "runner-a", Lease: time.Minute})
			if err != nil || j.State != redrive.JobRunning || j.Total != 10 {
				t.Fatalf("CreateJob = %+v, %v", j, err)
			}
			runDies(t, cat, j, redrive.JobRunParams{Holder: "runner-a", Lease: time.Minute, Target: target, Batch: 2})
			mid, err := redrive.New(cat).Job(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if mid.State != redrive.JobRunning || mid.Sent != 4 || mid.Holder != "runner-a" {
				t.Fatalf("after the crash: sent %d, holder %q; want 4 (two batches) held by runner-a", mid.Sent, mid.Holder)
			}
			if c, err := redrive.New(cat).ClaimJob(ctx, "runner-b", time.Minute, time.Now()); err != nil || c != nil {
				t.Fatalf("ClaimJob while runner-a's lease runs = %+v, %v; want none", c, err)
			}
			c, err := redrive.New(cat).ClaimJob(ctx, "runner-b", time.Minute, later())
			if err != nil || c == nil || c.ID != j.ID {
				t.Fatalf("ClaimJob after the lease ran out = %+v, %v", c, err)
			}
			d.die = -1
			out, err := redrive.New(cat).RunJob(ctx, c, redrive.JobRunParams{Holder: "runner-b", Lease: time.Minute, Target: target, Batch: 2, Now: later})
			if err != nil || out.State != redrive.JobDone || out.Sent != 10 || out.Done() != out.Total || out.Holder != "" {
				t.Fatalf("resumed job = %+v, %v", out, err)
			}
			seen := map[string]int{}
			for _, id := range consume(t, tr, "orders") {
				seen[id]++
			}
			dups := 0
			for i := range 10 {
				id := fmt.Sprintf("evt-%02d", i)
				switch {
				case seen[id] == 0:
					t.Errorf("%s never redriven", id)
				case seen[id] > 2:
					t.Errorf("%s redriven %d times", id, seen[id])
				case seen[id] == 2:
					dups++
					if i < 4 || i > 5 {
						t.Errorf("%s redriven twice, but it was not in the batch in flight (entries 4 and 5)", id)
					}
				}
			}
			if want := map[bool]int{false: 2, true: 0}[tx]; dups != want {
				t.Errorf("%d messages redriven twice, want %d (the batch in flight; none in one transaction)", dups, want)
			}
			r := ledgerRow(t, cat, tr)
			if r.Accepted != 10 || r.DeadLettered != 0 || r.InFlight != 0 || r.Acked != 10+int64(dups) {
				t.Errorf("ledger %+v", r)
			}
			if !tx && r.Lost != -int64(dups) || tx && r.Lost != 0 {
				t.Errorf("ledger lost %d, want %d (a duplicate shows as lost < 0, never a hidden loss)", r.Lost, -dups)
			}
			n, _ := cat.CountBy(ctx, "state", catalog.Filter{})
			if n["redriven"] != 10 {
				t.Errorf("states %v", n)
			}
		})
	}
}

func TestOneJobPerQueue(t *testing.T) {
	ctx := context.Background()
	_, cat := deadLettered(t, "orders", 3)
	first, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders"}, Actor: "alice", Holder: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []catalog.Filter{{Queue: "orders"}, {}} {
		_, err = redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: f, Actor: "bob"})
		var ce *redrive.JobConflictError
		if !errors.As(err, &ce) || !errors.Is(err, redrive.ErrJobActive) || ce.Job.ID != first.ID ||
			!strings.Contains(err.Error(), fmt.Sprintf("redrive job %d (running, by alice", first.ID)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("lily dlq cancel %d", first.ID)) {
			t.Errorf("second job for %+v: %v", f, err)
		}
	}
	other, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "payments"}, Actor: "bob"})
	if err != nil || other.State != redrive.JobQueued {
		t.Fatalf("a job of another queue: %+v, %v", other, err)
	}
	if _, err := redrive.New(cat).CancelJob(ctx, other.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := redrive.New(cat).CancelJob(ctx, first.ID, "carol"); err != nil {
		t.Fatal(err)
	}
	if _, err := redrive.New(cat).CancelJob(ctx, first.ID, "carol"); !errors.Is(err, redrive.ErrJobEnded) {
		t.Errorf("cancelling twice = %v", err)
	}
	if _, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Actor: "bob"}); err != nil {
		t.Errorf("a job of every queue once the others ended: %v", err)
	}
	js, err := redrive.New(cat).Jobs(ctx, redrive.JobQuery{})
	if err != nil || len(js) != 3 || js[0].Queue != redrive.AllQueues || js[2].State != redrive.JobCancelled || js[2].Error != "cancelled by carol" {
		t.Errorf("Jobs = %+v, %v", js, err)
	}
}

func TestCancelStopsTheRunner(t *testing.T) {
	ctx := context.Background()
	tr, cat := deadLettered(t, "orders", 10)
	j, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders"}, Actor: "t", Holder: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	d := &dieOn{tr: tr, die: -1, sent: map[string]int{}}
	d.onPublic = func(n int) {
		if n == 2 { // cancelled from elsewhere while the second batch is out
			if _, err := redrive.New(cat).CancelJob(ctx, j.ID, "carol"); err != nil {
				t.Error(err)
			}
		}
	}
	out, err := redrive.New(cat).RunJob(ctx, j, redrive.JobRunParams{Holder: "r1", Batch: 3,
		Target: func(context.Context, string) (redrive.Publisher, error) { return d, nil }})
	if !errors.Is(err, redrive.ErrJobCancelled) || out.State != redrive.JobCancelled || out.Sent != 6 {
		t.Fatalf("RunJob = %+v, %v; want cancelled after the batch in flight (6 sent)", out, err)
	}
	n, _ := cat.CountBy(ctx, "state", catalog.Filter{})
	if n["redriven"] != 6 || n["pending"] != 4 || len(d.sent) != 6 {
		t.Errorf("states %v, %d sent", n, len(d.sent))
	}
}

// sampleJob creates and runs a sampled job of 10 entries with a sample of
// 2; consumer, if set, runs meanwhile and settles what it receives.
func sampleJob(t *testing.T, observe time.Duration, target func(*sqlite.Transport) redrive.Publisher,
	consumer func(ctx context.Context, tr *sqlite.Transport, cat *catalog.Store)) (*redrive.Job, error, *catalog.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tr, cat := deadLettered(t, "orders", 10)
	var wg sync.WaitGroup
	if consumer != nil {
		wg.Add(1)
		go func() { defer wg.Done(); consumer(ctx, tr, cat) }()
	}
	defer func() { cancel(); wg.Wait() }()
	j, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders"}, Sample: 2, Observe: observe, Actor: "t", Holder: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	pub := target(tr)
	out, err := redrive.New(cat).RunJob(ctx, j, redrive.JobRunParams{Holder: "r1", Poll: 5 * time.Millisecond,
		Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }})
	return out, err, cat
}

// settleAll receives from orders and settles every delivery with action
// (through settle) until ctx ends.
func settleAll(action transport.Action, settle func(tr *sqlite.Transport, cat *catalog.Store) func(context.Context, *transport.SettleParams) error) func(context.Context, *sqlite.Transport, *catalog.Store) {
	return func(ctx context.Context, tr *sqlite.Transport, cat *catalog.Store) {
		s := settle(tr, cat)
		for ctx.Err() == nil {
			ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "orders", Max: 10, Consumer: "c", Wait: 20 * time.Millisecond})
			if err != nil {
				return
			}
			var ss []transport.Settlement
			for _, d := range ds {
				st := transport.Settlement{Delivery: d, Action: action}
				if action != transport.Ack {
					h := transport.CloneHeaders(d.Headers)
					evidence.Record{Reason: evidence.ReasonPermanent, ErrorMessage: "still broken", DeadLetteredAt: time.Now()}.Apply(h)
					if action == transport.Retry {
						h[evidence.HeaderRetryCount] = int32(1)
					}
					st.Headers, st.Reason, st.Delay = h, string(evidence.ReasonPermanent), time.Hour
				}
				ss = append(ss, st)
			}
			if len(ss) > 0 {
				_ = s(ctx, &transport.SettleParams{Settlements: ss})
			}
		}
	}
}

func direct(tr *sqlite.Transport, _ *catalog.Store) func(context.Context, *transport.SettleParams) error {
	return tr.Settle
}

// plain hides the SQLite transport's QueueInspector (and PublishTx): a
// broker-like target whose sample is judged by the ledger's ack events.
type plain struct{ tr *sqlite.Transport }

func (p plain) Publish(ctx context.Context, pp *transport.PublishParams) error {
	return p.tr.Publish(ctx, pp)
}

func TestSampleProvesSuccess(t *testing.T) {
	self := func(tr *sqlite.Transport) redrive.Publisher { return tr }
	broker := func(tr *sqlite.Transport) redrive.Publisher { return plain{tr} }
	accounted := func(tr *sqlite.Transport, cat *catalog.Store) func(context.Context, *transport.SettleParams) error {
		return ledger.Account(tr, ledger.New(cat)).Settle // records the acks as ledger events
	}
	t.Run("no consumer", func(t *testing.T) {
		for name, target := range map[string]func(*sqlite.Transport) redrive.Publisher{"sqlite": self, "ledger": broker} {
			out, err, cat := sampleJob(t, 100*time.Millisecond, target, nil)
			var se *redrive.SampleError
			if !errors.As(err, &se) || out.State != redrive.JobStopped || out.SampleClean ||
				!strings.Contains(err.Error(), "no consumer acked the sample within 100ms: is a consumer running?") {
				t.Errorf("%s: job %+v, %v", name, out, err)
			}
			if n, _ := cat.CountBy(context.Background(), "state", catalog.Filter{}); n["redriven"] != 2 || n["pending"] != 8 {
				t.Errorf("%s: states %v, want the sample redriven and the rest pending", name, n)
			}
		}
	})
	t.Run("acked", func(t *testing.T) {
		for name, c := range map[string]struct {
			target func(*sqlite.Transport) redrive.Publisher
			settle func(*sqlite.Transport, *catalog.Store) func(context.Context, *transport.SettleParams) error
		}{"sqlite": {self, direct}, "ledger": {broker, accounted}} {
			out, err, cat := sampleJob(t, time.Minute, c.target, settleAll(transport.Ack, c.settle))
			if err != nil || out.State != redrive.JobDone || !out.SampleClean || out.Sent != 10 || len(out.Sampled) != 2 {
				t.Errorf("%s: job %+v, %v", name, out, err)
			}
			var outcomes []string
			cat.EachAudit(context.Background(), catalog.AuditFilter{Op: out.Op}, func(r *catalog.AuditRecord) error {
				if r.Outcome == catalog.OutcomeObserved {
					outcomes = append(outcomes, r.Detail)
				}
				return nil
			})
			if len(outcomes) != 1 || !strings.Contains(outcomes[0], "all 2 sampled messages were acked") {
				t.Errorf("%s: observation audit %v", name, outcomes)
			}
		}
	})
	t.Run("dead-lettered again", func(t *testing.T) {
		out, err, _ := sampleJob(t, time.Minute, self, settleAll(transport.DeadLetter, direct))
		if err == nil || out.State != redrive.JobStopped || len(out.Returned) != 2 || !strings.Contains(err.Error(), "dead-lettered again") {
			t.Errorf("job %+v, %v", out, err)
		}
	})
	t.Run("retried", func(t *testing.T) {
		out, err, _ := sampleJob(t, time.Minute, self, settleAll(transport.Retry, direct))
		if err == nil || out.State != redrive.JobStopped || out.Sent != 2 || !strings.Contains(err.Error(), "were retried within 1m0s") {
			t.Errorf("job %+v, %v", out, err)
		}
	})
}

// counting is a publisher that counts what it was given.
type counting struct {
	mu   sync.Mutex
	sent map[string]int
}

func (c *counting) Publish(_ context.Context, p *transport.PublishParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range p.Messages {
		c.sent[m.EventID]++
	}
	return nil
}

func TestCrashersHeldBack(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		params  redrive.Params
		sent    int
		holding int
	}{
		{"bulk", redrive.Params{}, 2, 4},
		{"v1 named", redrive.Params{NewConsumerVersion: "v1"}, 4, 2},
		{"v2 named", redrive.Params{NewConsumerVersion: "v2"}, 5, 1},
		{"include", redrive.Params{IncludeCrashers: true}, 6, 0},
		{"picked by event ID", redrive.Params{Filter: catalog.Filter{EventIDs: []string{"crash-v1a", "crash-v1b"}}}, 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cat, err := catalog.Open(ctx, t.TempDir()+"/c.db")
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			now := time.Now()
			add := func(id, reason, version string) {
				h := transport.Headers{}
				evidence.Record{Reason: evidence.Reason(reason), ConsumerVersion: version, DeadLetteredAt: now}.Apply(h)
				if err := cat.Insert(ctx, catalog.NewEntry("orders", transport.Message{EventID: id, Body: []byte(id)}, h, reason, now)); err != nil {
					t.Fatal(err)
				}
			}
			add("ok-1", "permanent", "v1")
			add("crash-v1a", "delivery_limit", "v1")
			add("ok-2", "permanent", "v1")
			add("crash-v1b", "delivery_limit", "v1")
			add("crash-v0", "delivery_limit", "v0")
			add("crash-v2", "delivery_limit", "v2")
			pub := &counting{sent: map[string]int{}}
			p := c.params
			p.Actor, p.DryRun = "t", true
			plan, err := redrive.New(cat).Redrive(ctx, p)
			if err != nil || plan.Redriven != c.sent {
				t.Errorf("dry run = %+v, %v; want %d", plan, err, c.sent)
			}
			if c.name != "picked by event ID" && plan.HeldBack != c.holding {
				t.Errorf("dry run held back %d, want %d", plan.HeldBack, c.holding)
			}
			j, err := redrive.New(cat).CreateJob(ctx, redrive.JobSpec{Filter: p.Filter, IncludeCrashers: p.IncludeCrashers, NewConsumerVersion: p.NewConsumerVersion, Actor: "t", Holder: "r"})
			if err != nil {
				t.Fatal(err)
			}
			out, err := redrive.New(cat).RunJob(ctx, j, redrive.JobRunParams{Holder: "r", Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }})
			if err != nil || out.Sent != c.sent || len(pub.sent) != c.sent || out.Total != c.sent {
				t.Errorf("job %+v, %v; sent %v", out, err, pub.sent)
			}
			if c.name != "picked by event ID" && out.HeldBack != c.holding {
				t.Errorf("job held back %d, want %d", out.HeldBack, c.holding)
			}
			for id := range pub.sent {
				crasher := strings.HasPrefix(id, "crash-")
				if crasher && c.name == "bulk" || p.NewConsumerVersion != "" && id == "crash-"+p.NewConsumerVersion {
					t.Errorf("%s redriven, but it is held back", id)
				}
			}
		})
	}
}
