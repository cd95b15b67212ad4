package rabbitmq_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/soaktest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The fleet tests (issue 15, "many writers") run several consumer
// processes — this test binary re-executed by TestMain — on one queue and
// one PostgreSQL catalog, and check from the test process, which consumes
// nothing, that nothing was lost or doubled.
const (
	fleetRole    = "LILY_FLEET_ROLE" // "compete" or "park"
	fleetQueue   = "LILY_FLEET_QUEUE"
	fleetCatalog = "LILY_FLEET_CATALOG" // the catalog's postgres:// URL
	// fleetDir holds handled.log (one line per handler call, appended by
	// every process), "stop" (each child stops gracefully when it appears;
	// "stop.PID" stops one), "fixed" (the fix of the park scenario is
	// deployed) and "slow" (the park handler takes 100 ms for each message
	// of key A).
	fleetDir = "LILY_FLEET_DIR"
)

// fleetQueueConfig is the queue of a fleet role, the same in the test and
// in every child: competing consumers retry twice after 50 and 100 ms;
// the park queue keeps per-key order (a single active consumer).
func fleetQueueConfig(role, name string) lily.QueueConfig {
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportRabbitMQ, Breaker: new(bool),
		RetryAttempts: 2, RetryBackoffMillis: new(int64(50)), MaxRetryBackoffMillis: new(int64(100))}
	if role == "park" {
		qc.Ordering = lily.OrderingPark
	}
	return qc.WithDefaults()
}

// fleetChild is one consumer process of a fleet test: a Lily consumer on
// the queue through the PostgreSQL catalog's ledger (and held keys, for
// park), with the role's handler, until the stop file appears.
func fleetChild(role, queue, catalogURL, dir string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qc := fleetQueueConfig(role, queue)
	tr, err := childTransport(ctx, qc)
	if err != nil {
		return 3
	}
	defer tr.Close()
	cat, err := catalog.Open(ctx, catalogURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet child:", err)
		return 3
	}
	defer cat.Close()
	logf, err := os.OpenFile(filepath.Join(dir, "handled.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet child:", err)
		return 3
	}
	defer logf.Close()
	pid := os.Getpid()
	// One write per handler call, before the handler returns: O_APPEND
	// keeps the lines of every process whole, and a line is never missing
	// for a message that was settled (a crash between the two logs it
	// again on the redelivery, never not at all).
	record := func(fields ...any) error {
		_, err := fmt.Fprintln(logf, append([]any{pid}, fields...)...)
		return err
	}
	var handler lily.HandlerFunc
	opts := lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 32, ReceiveWait: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	switch role {
	case "compete":
		handler = func(_ context.Context, d *lily.Delivery) error {
			outcome := competeOutcome(string(d.Body), d.RetryCount)
			if err := record(string(d.Body), outcome, d.RetryCount, d.DeliveryCount); err != nil {
				return err
			}
			switch outcome {
			case "perm":
				return lily.Permanent(errors.New("order references a retired SKU"))
			case "retry":
				return errors.New("inventory service timed out")
			}
			return nil
		}
	case "park":
		opts.Keys, opts.KeyPoll = redrive.NewKeys(cat), 20*time.Millisecond
		fixed, slow := filepath.Join(dir, "fixed"), filepath.Join(dir, "slow")
		handler = func(_ context.Context, d *lily.Delivery) error {
			key, seq, ok := parseParkBody(string(d.Body))
			if !ok {
				return lily.Permanent(fmt.Errorf("body %q is not KEY/SEQ", d.Body))
			}
			if err := record(key, seq, "begin"); err != nil {
				return err
			}
			if _, err := os.Stat(slow); err == nil && key == "A" {
				time.Sleep(100 * time.Millisecond) // simulates a big account: a slower dependency
			}
			outcome := "ok"
			if key == "K" && seq == parkHeadSeq {
				if _, err := os.Stat(fixed); err != nil {
					outcome = "perm"
				}
			}
			if err := record(key, seq, outcome); err != nil {
				return err
			}
			if outcome == "perm" {
				return lily.Permanent(fmt.Errorf("order K/%d references a retired SKU", seq))
			}
			return nil
		}
	default:
		fmt.Fprintln(os.Stderr, "fleet child: unknown role", role)
		return 3
	}
	c, err := lily.NewConsumer(ledger.Account(tr, ledger.New(cat)), handler, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet child:", err)
		return 3
	}
	go func() { // the test stops the fleet, or this child, with a file
		stopped, _ := transporttest.Poll(ctx, func() (bool, string) {
			for _, name := range []string{"stop", "stop." + strconv.Itoa(pid)} {
				if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
					return true, ""
				}
			}
			return false, ""
		})
		if stopped {
			cancel()
		}
	}()
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fleet child:", err)
		return 3
	}
	return 0
}

// competeOutcome is what the competing consumers' handler does with body
// ("lily-N" or "foreign-N") on its retry'th retry: N%10 == 0 fails
// permanently; N%10 == 1 fails transiently once, N%10 == 2 twice, then
// succeeds; the rest succeed.
func competeOutcome(body string, retry int) string {
	_, num, _ := strings.Cut(body, "-")
	n, _ := strconv.Atoi(num)
	switch {
	case n%10 == 0:
		return "perm"
	case n%10 == 1 && retry < 1, n%10 == 2 && retry < 2:
		return "retry"
	}
	return "ok"
}

// fleet runs the consumer processes of one test on one queue and catalog.
type fleet struct {
	t   *testing.T
	dir string
	env []string

	mu    sync.Mutex
	procs []*fleetProc
}

// fleetProc is one child process; done receives its exit once.
type fleetProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	killed bool
}

// newFleet prepares children of role on queue with the catalog at
// catalogURL. When the test ends, every child still running is stopped
// (the stop file; killed if it does not exit within 30 s) — before the
// queue and the catalog's schema are removed, since those clean-ups were
// registered earlier.
func newFleet(t *testing.T, role, queue, catalogURL string) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir()}
	f.env = append(os.Environ(), fleetRole+"="+role, fleetQueue+"="+queue, fleetCatalog+"="+catalogURL, fleetDir+"="+f.dir)
	t.Cleanup(func() { f.stopAll(false) })
	return f
}

// start runs one more child.
func (f *fleet) start() *fleetProc {
	f.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = f.env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	p := &fleetProc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// kill ends p with SIGKILL, as a host dies, and waits for it.
func (f *fleet) kill(p *fleetProc) {
	f.t.Helper()
	p.killed = true
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		f.t.Fatalf("kill -9 %d: %v", p.cmd.Process.Pid, err)
	}
	<-p.done
}

// stop stops p gracefully (its stop file) and waits for it to exit 0.
func (f *fleet) stop(p *fleetProc) {
	f.t.Helper()
	if err := writeFile(f.dir, "stop."+strconv.Itoa(p.cmd.Process.Pid)); err != nil {
		f.t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		f.t.Fatalf("consumer process %d did not stop within 30 s of its stop file", p.cmd.Process.Pid)
	}
	if p.err != nil {
		f.t.Fatalf("consumer process %d stopped with %v", p.cmd.Process.Pid, p.err)
	}
}

// stopAll asks every child to stop (the stop file) and waits for them;
// with check, a child that did not exit 0 (or was not killed) fails the
// test.
func (f *fleet) stopAll(check bool) {
	if err := writeFile(f.dir, "stop"); err != nil {
		f.t.Error(err)
	}
	f.mu.Lock()
	procs := f.procs
	f.mu.Unlock()
	timeout := time.After(30 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-timeout:
			p.cmd.Process.Kill()
			<-p.done
			f.t.Errorf("consumer process %d did not stop within 30 s of the stop file", p.cmd.Process.Pid)
			continue
		}
		if check && !p.killed && p.err != nil {
			f.t.Errorf("consumer process %d: %v", p.cmd.Process.Pid, p.err)
		}
	}
}

// diagnoseOnFailure registers a clean-up that, when the test has failed
// with children still running, prints what the broker says about queue
// and its consumers (who holds what unacknowledged) and makes every
// running child print its goroutines (SIGQUIT) before they are stopped.
func (f *fleet) diagnoseOnFailure(queue string) {
	f.t.Cleanup(func() {
		if !f.t.Failed() {
			return
		}
		mgmt, err := rabbitmq.ManagementFor(brokerURL())
		if err != nil {
			f.t.Logf("diagnosis: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var q map[string]any
		found, err := mgmt.Get(ctx, "/api/queues/"+mgmt.VHostPath()+"/"+url.PathEscape(queue), &q)
		f.t.Logf("diagnosis: queue %s (found %v, err %v): messages %v, ready %v, unacknowledged %v, dlx %v, consumers %v",
			queue, found, err, q["messages"], q["messages_ready"], q["messages_unacknowledged"], q["messages_dlx"], q["consumers"])
		var consumers []struct {
			Tag      string `json:"consumer_tag"`
			Prefetch int    `json:"prefetch_count"`
			Queue    struct {
				Name string `json:"name"`
			} `json:"queue"`
			Channel json.RawMessage `json:"channel_details"` // an object, or [] once the channel is gone
		}
		if _, err := mgmt.Get(ctx, "/api/consumers/"+mgmt.VHostPath(), &consumers); err != nil {
			f.t.Logf("diagnosis: consumers: %v", err)
		}
		for _, c := range consumers {
			if c.Queue.Name != queue {
				continue
			}
			var details struct {
				Name string `json:"name"`
			}
			json.Unmarshal(c.Channel, &details)
			var ch map[string]any
			mgmt.Get(ctx, "/api/channels/"+url.PathEscape(details.Name), &ch)
			f.t.Logf("diagnosis: consumer %s (prefetch %d) on channel %q: unacknowledged %v, unconfirmed %v",
				c.Tag, c.Prefetch, details.Name, ch["messages_unacknowledged"], ch["messages_unconfirmed"])
		}
		f.mu.Lock()
		procs := f.procs
		f.mu.Unlock()
		for _, p := range procs {
			select {
			case <-p.done:
			default:
				f.t.Logf("diagnosis: child %d prints its goroutines", p.cmd.Process.Pid)
				p.cmd.Process.Signal(syscall.SIGQUIT)
				<-p.done
			}
		}
	})
}

// drainLeftovers makes sure, from exact counts, that nothing of queue is
// left once every child has stopped. The wait before the stop reads the
// management API's unacknowledged count, a statistic sampled every 5 s:
// it can say "nothing in flight" while a child still holds a redelivery
// (a message the killed process handled but never acknowledged), which a
// graceful stop then returns to the queue. With no consumer, AMQP's counts
// of the queue and its retry buckets are exact: while they are not zero, one
// child is started to handle what is left, and stopped again once the
// queue, its buckets and the ledger say it is done.
func (f *fleet) drainLeftovers(tr *rabbitmq.Transport, cat *catalog.Store, acc *ledger.Accounted, queue string) {
	f.t.Helper()
	ctx := context.Background()
	for round := 1; ; round++ {
		p, err := tr.InFlightParts(ctx, queue)
		if err != nil {
			f.t.Fatal(err)
		}
		if p.Ready+p.Retrying+p.Unacked == 0 {
			return
		}
		if round > 5 { // a leftover needs at most three attempts, a round each
			f.t.Fatalf("after %d rounds of a child handling the leftovers, the queue still holds %+v", round-1, p)
		}
		f.t.Logf("with every child stopped, the queue holds %+v (ledger %+v): one child handles the rest", p, ledgerRow(f.t, cat, acc, queue))
		before := len(f.handled())
		if err := os.Remove(filepath.Join(f.dir, "stop")); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.t.Fatal(err)
		}
		child := f.start()
		left := p.Ready + p.Retrying
		transporttest.WaitWithin(f.t, 30*time.Second, "the leftovers handled", func() (bool, string) {
			q, err := tr.InFlightParts(ctx, queue)
			if err != nil {
				return false, err.Error()
			}
			calls := int64(len(f.handled()) - before)
			r := ledgerRow(f.t, cat, acc, queue)
			return calls >= left && q.Ready+q.Retrying == 0 && r.InFlight == 0,
				fmt.Sprintf("%d handler calls since the restart, queue %+v, ledger %+v", calls, q, r)
		})
		f.stop(child)
	}
}

// writeFile creates the empty file dir/name (a signal to the children).
func writeFile(dir, name string) error { return os.WriteFile(filepath.Join(dir, name), nil, 0o644) }

// handled returns the lines the children logged so far, split in fields.
func (f *fleet) handled() [][]string {
	f.t.Helper()
	fh, err := os.Open(filepath.Join(f.dir, "handled.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	var out [][]string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			out = append(out, strings.Fields(line))
		}
	}
	if err := sc.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// openFleetCatalog connects the test process to the broker (with the
// management API: in flight counts every process's deliveries) and to a
// PostgreSQL catalog of its own, and declares qc through the catalog's
// ledger. It returns the transport, the catalog, its URL and the
// transport through the ledger.
func openFleetCatalog(t *testing.T, qc lily.QueueConfig) (*rabbitmq.Transport, *catalog.Store, string, *ledger.Accounted) {
	t.Helper()
	mgmt, err := rabbitmq.ManagementFor(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	tr := openWith(t, rabbitmq.Options{Management: mgmt})
	t.Cleanup(func() { tr.Close() })
	url := pgtest.URL(t)
	cat, err := catalog.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	acc := ledger.Account(tr, ledger.New(cat))
	declared(t, acc, qc)
	return tr, cat, url, acc
}

// rawPublishAll publishes bodies to queue with a plain amqp091 client and
// no message_id, as a foreign producer does, and waits for every confirm.
func rawPublishAll(ctx context.Context, t *testing.T, queue string, bodies [][]byte) {
	t.Helper()
	_, ch := rawChannel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dcs := make([]*amqp.DeferredConfirmation, len(bodies))
	for i, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{Body: b, DeliveryMode: amqp.Persistent})
		if err != nil {
			t.Fatalf("raw publish to %s: %v", queue, err)
		}
		dcs[i] = dc
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("raw publish %d to %s not confirmed: ok %v, %v", i, queue, ok, err)
		}
	}
}

// ledgerRow returns queue's ledger row, in flight counted by inflight.
func ledgerRow(t *testing.T, cat *catalog.Store, inflight *ledger.Accounted, queue string) ledger.Row {
	t.Helper()
	rows, err := ledger.New(cat).Rows(context.Background(), inflight)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue == queue {
			return r
		}
	}
	t.Fatalf("the ledger has no row for %s: %+v", queue, rows)
	return ledger.Row{}
}

// settledLedger waits until queue's ledger row is want — the broker's
// statistics (management API) are sampled every 5 s, and a consumer
// process that just exited may still count for a moment — and fails the
// test with the last row if it does not come within 30 s.
func settledLedger(t *testing.T, cat *catalog.Store, inflight *ledger.Accounted, want ledger.Row) {
	t.Helper()
	transporttest.WaitWithin(t, 30*time.Second, fmt.Sprintf("the ledger %+v", want), func() (bool, string) {
		row := ledgerRow(t, cat, inflight, want.Queue)
		return row == want, fmt.Sprintf("%+v", row)
	})
}

// TestFleetCompetingConsumers: three consumer processes compete for one
// quorum queue on one PostgreSQL catalog — 1,500 messages published by
// lily.Publish, 1,500 by a foreign producer without message IDs; a tenth
// fail permanently, a fifth transiently once or twice before succeeding.
// One process is killed with SIGKILL midway and started again. At the end
// (this process consumes nothing) the DLQ is ingested and: the ledger
// balances with nothing in flight, the catalog holds exactly one entry per
// permanently failing message (a dead letter handed off twice around the
// kill is one entry), and every other message reached a handler and
// succeeded.
func TestFleetCompetingConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := fleetQueueConfig("compete", randomName("fleet.compete"))
	tr, cat, url, acc := openFleetCatalog(t, qc)
	f := newFleet(t, "compete", qc.Name, url)
	procs := []*fleetProc{f.start(), f.start(), f.start()}

	// 1000 messages keep the kill mid-flow with the killed process's
	// window in flight (redelivered > 0 below) and the same conservation
	// checks; the soak run (-tags soak) sends 3000.
	half := soaktest.Pick(500, 1500)
	want := map[string]string{} // body → "perm" or "ok" in the end
	lilyMsgs := make([]lily.Message, half)
	foreign := make([][]byte, half)
	for i := range half {
		lilyMsgs[i].Body = fmt.Appendf(nil, "lily-%d", i)
		foreign[i] = fmt.Appendf(nil, "foreign-%d", i)
		for _, b := range []string{string(lilyMsgs[i].Body), string(foreign[i])} {
			want[b] = competeOutcome(b, 2)
		}
	}
	perm := 0
	for _, o := range want {
		if o == "perm" {
			perm++
		}
	}
	began := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < half; i += 250 {
			if err := lily.Publish(ctx, acc, qc.Name, lilyMsgs[i:i+250]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	rawPublishAll(ctx, t, qc.Name, foreign)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	published := time.Since(began)

	// Midway, one host dies; its deliveries go back to the queue with
	// their counts raised, and a new process takes its place.
	// The process to kill must be consuming (a window of deliveries held),
	// not still starting: wait for its own handler calls too.
	victim := strconv.Itoa(procs[0].cmd.Process.Pid)
	transporttest.WaitWithin(t, 40*time.Second, "a third of the messages handled, some by the process to kill", func() (bool, string) {
		ls := f.handled()
		mine := 0
		for _, l := range ls {
			if len(l) > 0 && l[0] == victim {
				mine++
			}
		}
		return len(ls) >= 2*half/3 && mine > 0, fmt.Sprintf("%d handler calls, %d by process %s", len(ls), mine, victim)
	})
	f.kill(procs[0])
	killedAt := time.Since(began)
	f.start()

	// Done when every message had its final handler call and the ledger
	// shows nothing in flight and nothing lost. (Lost may be negative
	// here: a dead letter handed off twice around the kill — the DLQ copy
	// confirmed, the original's ack lost with the process — is counted
	// twice while both copies wait in the broker's DLQ; ingest makes them
	// one entry.)
	var handledAt time.Duration
	f.diagnoseOnFailure(qc.Name)
	transporttest.WaitWithin(t, 50*time.Second, "every message handled to its end and the ledger settled", func() (bool, string) {
		final := map[string]bool{}
		for _, l := range f.handled() {
			if len(l) >= 3 && l[2] != "retry" {
				final[l[1]] = true
			}
		}
		if len(final) < len(want) {
			return false, fmt.Sprintf("%d of %d messages handled to their end", len(final), len(want))
		}
		if handledAt == 0 {
			handledAt = time.Since(began)
		}
		r := ledgerRow(t, cat, acc, qc.Name)
		return r.Accepted == int64(2*half) && r.InFlight == 0 && r.Lost <= 0, fmt.Sprintf("ledger %+v", r)
	})
	settled := time.Since(began)
	f.stopAll(true)
	f.drainLeftovers(tr, cat, acc, qc.Name)

	n, err := cat.Ingest(ctx, acc, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The catalog: one entry per permanently failing message, none twice.
	entries := map[string]int{}
	dups := 0
	if err := cat.Each(ctx, catalog.Filter{Queue: qc.Name}, func(e *catalog.Entry) error {
		entries[string(e.Body)]++
		if e.State != catalog.StatePending || e.Reason != "permanent" {
			t.Errorf("entry %d (%s): state %s, reason %s; want pending, permanent", e.ID, e.Body, e.State, e.Reason)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	total := 0
	for body, c := range entries {
		total += c
		if want[body] != "perm" || c != 1 {
			t.Errorf("catalog holds %d entries of %s (outcome %q); want one entry per permanently failing message", c, body, want[body])
		}
	}
	if total != perm {
		t.Errorf("catalog holds %d entries, want %d (the permanently failing messages)", total, perm)
	}
	dups = n - total
	// Every other message reached a handler and succeeded; none that
	// fails permanently ever succeeded.
	ok, calls, redelivered := map[string]bool{}, 0, 0
	for _, l := range f.handled() {
		calls++
		if len(l) != 5 {
			t.Fatalf("handled.log line %q: want PID BODY OUTCOME RETRY DELIVERY-COUNT", strings.Join(l, " "))
		}
		if l[2] == "ok" {
			ok[l[1]] = true
		}
		if l[4] != "1" {
			redelivered++
		}
	}
	// The kill took deliveries with it (the window of a busy consumer):
	// they came back to the others with their counts raised.
	if redelivered == 0 {
		t.Errorf("no handler call had a delivery count above 1: the kill of process %d returned nothing", procs[0].cmd.Process.Pid)
	}
	for body, o := range want {
		if (o == "ok") != ok[body] {
			t.Errorf("message %s: handled successfully = %v, want %v", body, ok[body], o == "ok")
		}
	}
	settledLedger(t, cat, acc, ledger.Row{Queue: qc.Name, Accepted: int64(2 * half), Acked: int64(2*half - perm), DeadLettered: int64(perm)})
	t.Logf("%d messages, %d handler calls (%d redelivered), %d dead letters drained (%d merged as duplicates), %d catalog entries; published in %v, killed at %v, all handled at %v, ledger settled at %v",
		2*half, calls, redelivered, n, dups, total, published.Round(time.Millisecond), killedAt.Round(time.Millisecond), handledAt.Round(time.Millisecond), settled.Round(time.Millisecond))
}
