package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestDLQParkedUnpark parks a key with a consumer of a queue with ordering
// "park", lists it with 'lily dlq parked' and 'lily dlq list', unparks it
// with a dry run, then for real while the head still fails (exit 1: the key
// stays parked), then after the fix — and checks that the key's messages
// were processed in publish order and the ledger balances.
func TestDLQParkedUnpark(t *testing.T) {
	t.Parallel()
	q := lily.QueueConfig{Name: "payments.captured", Ordering: lily.OrderingPark, RetryAttempts: 1, RetryBackoffMillis: new(int64(20))}.WithDefaults()
	db, w := parkedAcct2(t, q)
	processed := w.processed

	code, out, errOut := run(t, "dlq", "parked", "--db", db, "--json")
	var parked struct{ Keys []redrive.HeldKey }
	if code != 0 || json.Unmarshal([]byte(out), &parked) != nil || len(parked.Keys) != 1 {
		t.Fatalf("dlq parked --json = %d %q %q", code, out, errOut)
	}
	k := parked.Keys[0]
	if k.Key != "acct-2" || k.Mode != "park" || k.State != "held" || k.Parked != 2 || k.Head == nil || k.Head.State != catalog.StatePending {
		t.Errorf("parked key = %+v", k)
	}
	code, out, _ = run(t, "dlq", "parked", "--db", db)
	if code != 0 || !strings.Contains(out, "acct-2") || !strings.Contains(out, "park") {
		t.Errorf("dlq parked = %d %q", code, out)
	}
	code, out, _ = run(t, "dlq", "list", "--db", db)
	if code != 0 || !strings.Contains(out, "1 parked or blocked keys") || !strings.Contains(out, "acct-2") {
		t.Errorf("dlq list = %d %q", code, out)
	}

	// Usage errors name the flag.
	if code, _, errOut := run(t, "dlq", "unpark", "--db", db, "--key", "acct-2"); code != 2 || !strings.Contains(errOut, "--queue is required") {
		t.Errorf("unpark without --queue = %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "dlq", "unpark", "--db", db, "--queue", q.Name, "--key", "acct-9"); code != 1 || !strings.Contains(errOut, "not parked") {
		t.Errorf("unpark of a free key = %d %q", code, errOut)
	}

	code, out, _ = run(t, "dlq", "unpark", "--db", db, "--queue", q.Name, "--key", "acct-2", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || !strings.Contains(out, "2 parked behind it") {
		t.Errorf("unpark --dry-run = %d %q", code, out)
	}
	// Unparked before the fix: the head fails again, the key stays parked.
	code, out, _ = run(t, "dlq", "unpark", "--db", db, "--queue", q.Name, "--key", "acct-2", "--wait", "20s", "--actor", "ops-anna")
	if code != 1 || !strings.Contains(out, "failed again") {
		t.Fatalf("unpark before the fix = %d %q", code, out)
	}
	if got := processed("acct-2"); !slices.Equal(got, []string{"acct-2/0"}) {
		t.Fatalf("acct-2 processed %v while parked", got)
	}

	w.fixed.Store(true)
	code, out, _ = run(t, "dlq", "unpark", "--db", db, "--queue", q.Name, "--key", "acct-2", "--wait", "20s", "--json", "--actor", "ops-anna")
	var res unparkJSON
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != "free" || res.Action != "redrive_head" {
		t.Fatalf("unpark after the fix = %d %q", code, out)
	}
	if got, want := processed("acct-2"), []string{"acct-2/0", "acct-2/1", "acct-2/2", "acct-2/3"}; !slices.Equal(got, want) {
		t.Errorf("acct-2 processed in order %v, want %v", got, want)
	}
	outcomes := auditOutcomes(t, db)
	if outcomes["unpark/would_unpark/dry"] != 1 || outcomes["unpark/redriven"] != 2 || outcomes["release/released"] != 2 {
		t.Errorf("audit outcomes = %v", outcomes)
	}
	w.stop()
	code, out, _ = run(t, "reconcile", "--db", db, "--json")
	if code != 0 || !strings.Contains(out, `"accepted": 8`) || !strings.Contains(out, `"acked": 8`) {
		t.Errorf("reconcile = %d %q", code, out)
	}
}

// TestDLQUnparkMaxRedrivesZero: with max_redrives = 0 in --config, the
// head of a parked key is a manual decision: unpark refuses to redrive it
// (the catalog used to turn a 0 into the default 2 and redrive it).
func TestDLQUnparkMaxRedrivesZero(t *testing.T) {
	t.Parallel()
	q := lily.QueueConfig{Name: "payments.captured", Ordering: lily.OrderingPark, RetryAttempts: 1, RetryBackoffMillis: new(int64(20)), MaxRedrives: new(0)}.WithDefaults()
	db, w := parkedAcct2(t, q)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\nordering = \"park\"\nretry_attempts = 1\nmax_redrives = 0\n", db, q.Name))
	w.fixed.Store(true)
	code, out, errOut := run(t, "dlq", "unpark", "--config", cfg, "--queue", q.Name, "--key", "acct-2", "--wait", "5s")
	if code != 1 || !strings.Contains(errOut, "max_redrives 0") {
		t.Errorf("unpark with max_redrives = 0: exit %d %q %q, want 1 naming max_redrives 0", code, out, errOut)
	}
	if got := w.processed("acct-2"); !slices.Equal(got, []string{"acct-2/0"}) {
		t.Errorf("acct-2 processed %v: the head was redriven past max_redrives = 0", got)
	}
	w.stop()
	if code, out, _ := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile = %d %q", code, out)
	}
}

// TestDLQUnparkRabbitMQ parks a key on a RabbitMQ queue (its head is a
// broker dead letter until ingested) and unparks it with --config: the
// command ingests the queue's DLQ to find the head, redrives it, and the
// key's messages are processed in publish order.
func TestDLQUnparkRabbitMQ(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "catalog.db")
	queue := fmt.Sprintf("unpark%08x.postings", rand.Uint32())
	cfgPath := writeConfig(t, fmt.Sprintf(`db = %q
rabbitmq_url = %q
[[queue]]
name = %q
transport = "rabbitmq"
ordering = "park"
owner = "team-ledger"
`, db, url, queue))
	cfg, err := config.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := cfg.Queue(queue)
	cleanupRabbitQueues(t, url, q)
	rmq, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer rmq.Close()
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w := startParkWorkload(t, ledger.Account(rmq, ledger.New(cat)), cat, q)
	waittest.For(t, "acct-2 parked with 2 behind its head", func() bool {
		ks, err := redrive.NewKeys(cat).HeldKeys(ctx, q.Name)
		return err == nil && len(ks) == 1 && ks[0].Parked == 2
	})
	// The head is still in the broker's DLQ: 'parked' ingests it first.
	code, out, errOut := run(t, "dlq", "parked", "--config", cfgPath, "--json")
	var parked struct{ Keys []redrive.HeldKey }
	if code != 0 || json.Unmarshal([]byte(out), &parked) != nil || len(parked.Keys) != 1 || parked.Keys[0].Head == nil {
		t.Fatalf("dlq parked --config = %d %q %q: want acct-2 with its head ingested", code, out, errOut)
	}
	w.fixed.Store(true)
	code, out, errOut = run(t, "dlq", "unpark", "--config", cfgPath, "--queue", q.Name, "--key", "acct-2", "--wait", "30s", "--json")
	var res unparkJSON
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != "free" || res.Action != "redrive_head" {
		t.Fatalf("unpark --config = %d %q %q", code, out, errOut)
	}
	if got, want := w.processed("acct-2"), []string{"acct-2/0", "acct-2/1", "acct-2/2", "acct-2/3"}; !slices.Equal(got, want) {
		t.Errorf("acct-2 processed in order %v, want %v", got, want)
	}
	w.stop()
	if code, out, _ := run(t, "reconcile", "--config", cfgPath, "--json"); code != 0 || !strings.Contains(out, `"accepted": 8`) || !strings.Contains(out, `"acked": 8`) {
		t.Errorf("reconcile = %d %q", code, out)
	}
}

// parkWorkload is a consumer of an ordering "park" queue that has been
// sent four messages each of keys acct-1 and acct-2, and fails acct-2/1
// (permanently) until fixed is set.
type parkWorkload struct {
	fixed *atomic.Bool
	log   *transporttest.BodyLog
	stop  func()
}

// parkedAcct2 runs the park workload on q in a fresh SQLite database
// until acct-1 is processed and acct-2 parked with 2 behind its head; it
// returns the database file and the workload. The transport
// is closed when the test ends.
func parkedAcct2(t *testing.T, q lily.QueueConfig) (string, *parkWorkload) {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	tr, err := sqlite.Open(ctx, db, sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	w := startParkWorkload(t, tr, cat, q)
	waittest.For(t, "acct-1 processed and acct-2 parked with 2 behind its head", func() bool {
		ks, err := redrive.NewKeys(cat).HeldKeys(ctx, q.Name)
		return err == nil && len(ks) == 1 && ks[0].Parked == 2 && len(w.processed("acct-1")) == 4
	})
	return db, w
}

// startParkWorkload declares q on tr, publishes the workload and starts
// its consumer, which holds keys in cat.
func startParkWorkload(t *testing.T, tr interface {
	transport.Transport
	transport.Declarer
}, cat *catalog.Store, q lily.QueueConfig) *parkWorkload {
	t.Helper()
	ctx := context.Background()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	var msgs []lily.Message
	for i := range 4 {
		for _, k := range []string{"acct-1", "acct-2"} {
			msgs = append(msgs, lily.Message{Key: k, Body: fmt.Appendf(nil, "%s/%d", k, i)})
		}
	}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	w := &parkWorkload{fixed: new(atomic.Bool)}
	w.log = &transporttest.BodyLog{Fail: func(body string) error {
		if body == "acct-2/1" && !w.fixed.Load() {
			return lily.Permanent(errors.New("ledger account acct-2 is frozen"))
		}
		return nil
	}}
	c, err := lily.NewConsumer(tr, w.log, lily.ConsumerOptions{Queue: q, Keys: redrive.NewKeys(cat), KeyPoll: 20 * time.Millisecond,
		ReceiveWait: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.stop = transporttest.Start(t, c)
	return w
}

// processed returns the bodies of key's messages in the order they were
// first processed.
func (w *parkWorkload) processed(key string) []string {
	var out []string
	for _, b := range w.log.Firsts() {
		if strings.HasPrefix(b, key+"/") {
			out = append(out, b)
		}
	}
	return out
}

// TestUnparkHeadFailedOnceItsDeadLetterLanded: the consumer holds a key
// again before it settles the head's new dead letter, so for a moment the
// key reads held while the head's entry still reads redriven. 'lily dlq
// unpark' used to report head_failed in that moment; an unpark run right
// after it (the fix shipped) then took the head for one on its way back,
// waited for it, and never redrove it once its dead letter landed.
// head_failed now waits for the dead letter to be in the catalog.
func TestUnparkHeadFailedOnceItsDeadLetterLanded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	const q, key, head = "payments.captured", "acct-2", "head-1"
	e := catalog.NewEntry(q, transport.Message{EventID: head, Key: key, Body: []byte("h")}, transport.Headers{}, "permanent", time.Now())
	if err := cat.Insert(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := redrive.NewKeys(cat).HoldKey(ctx, q, key, redrive.KeyModePark, redrive.KeyHeld, head); err != nil {
		t.Fatal(err)
	}
	setHead := func(state catalog.State) {
		t.Helper()
		if _, err := cat.DB().ExecContext(ctx, `UPDATE lily_dlq_entries SET state = ?, redrive_count = 1 WHERE id = ?`, string(state), e.ID); err != nil {
			t.Fatal(err)
		}
	}
	cat.Close()
	env, err := openDLQ(ctx, storeFlags{db: db})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	targets := &redriveTargets{env: env}
	defer targets.Close()
	cat = env.cat
	res := redrive.UnparkResult{Action: "redrive_head", Key: redrive.HeldKey{Queue: q, Key: key, HeadEventID: head}}

	// Held again, the dead letter not in yet: the head's entry reads redriven.
	setHead(catalog.StateRedriven)
	if outcome, _, err := awaitKey(ctx, cat, targets, q, key, res, 0); err != nil || outcome != "sent" {
		t.Errorf("key held, head's entry redriven: outcome %q (%v), want sent: its dead letter has not landed", outcome, err)
	}
	// The dead letter landed.
	setHead(catalog.StatePending)
	if outcome, parked, err := awaitKey(ctx, cat, targets, q, key, res, 0); err != nil || outcome != "head_failed" || parked != 0 {
		t.Errorf("key held, head's entry pending: outcome %q, %d parked (%v), want head_failed", outcome, parked, err)
	}
}
