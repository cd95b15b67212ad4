package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The second-process reconcile test re-executes this test binary as a
// consumer process (TestMain) that holds its deliveries in a slow handler.
// (These tests run 'lily reconcile', so they live with the CLI, not with
// the RabbitMQ transport.)
const (
	holdChildQueue   = "LILY_RMQ_HOLD_QUEUE"
	holdChildURL     = "LILY_RMQ_HOLD_URL" // the broker
	holdChildCatalog = "LILY_RMQ_HOLD_CATALOG"
	holdChildDir     = "LILY_RMQ_HOLD_DIR" // "<id>.started" per handler call
	holdCount        = 50
)

func holdQueueConfig(name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: lily.TransportRabbitMQ, Breaker: new(bool),
		HandlerTimeoutMillis: new(int64(120000))}.WithDefaults()
}

// holdChild consumes the queue (on the broker at url) through the catalog's ledger (as any Lily
// consumer does) with holdCount handlers that each wait for the release
// (the end of its standard input: the parent closes it), then exits once
// nothing is left in flight.
func holdChild(queue, url, catalogPath, dir string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qc := holdQueueConfig(queue)
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	tr.Register(qc.Spec())
	defer tr.Close()
	cat, err := catalog.Open(ctx, catalogPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer cat.Close()
	released := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(released)
	}()
	c, err := lily.NewConsumer(ledger.Account(tr, ledger.New(cat)), lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%x.started", d.Body)), nil, 0o644); err != nil {
			return err
		}
		select {
		case <-released:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), lily.ConsumerOptions{Queue: qc, Concurrency: holdCount, Prefetch: 2 * holdCount, // the runtime fetches again once half its window is free
		ReceiveWait: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	go func() {
		// Idle only after the release: before it, every message is held.
		select {
		case <-released:
		case <-ctx.Done():
			return
		}
		transporttest.CancelWhenIdle(ctx, tr, queue, 50*time.Millisecond, cancel)
	}()
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// reconcileRow runs 'lily reconcile --json' in this process and returns
// its exit code and the queue's row.
func reconcileRow(t *testing.T, cfg, queue string) (int, ledger.Row, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"reconcile", "--config", cfg, "--json"}, &out, &errb)
	var got struct {
		Queues []ledger.Row `json:"queues"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("reconcile --json: %v: %s %s", err, out.String(), errb.String())
	}
	for _, r := range got.Queues {
		if r.Queue == queue {
			return code, r, errb.String()
		}
	}
	t.Fatalf("reconcile shows no row for %s: %s", queue, out.String())
	return 0, ledger.Row{}, ""
}

// reconcileEnv is what a reconcile test runs 'lily reconcile' over: a
// lily.toml in dir naming the broker and one queue, and the SQLite database
// it names (db), whose catalog st counts the queue's messages through acc.
type reconcileEnv struct {
	dir, db, cfg string
	st           *catalog.Store
	acc          *ledger.Accounted
}

// newReconcileEnv writes the lily.toml for qc on the broker at url
// (queueLines: its [[queue]] settings after name and transport), opens the
// database's catalog and declares qc through the catalog's ledger; all is
// removed when the test ends.
func newReconcileEnv(t *testing.T, url string, tr *rabbitmq.Transport, qc lily.QueueConfig, queueLines string) reconcileEnv {
	t.Helper()
	dir := t.TempDir()
	env := reconcileEnv{dir: dir, db: filepath.Join(dir, "lily.db"), cfg: filepath.Join(dir, "lily.toml")}
	if err := os.WriteFile(env.cfg, []byte(fmt.Sprintf("db = %q\nrabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\n%s",
		env.db, url, qc.Name, queueLines)), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := catalog.Open(context.Background(), env.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env.st, env.acc = st, ledger.Account(tr, ledger.New(st))
	cleanupRabbitQueues(t, url, qc)
	if err := env.acc.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return env
}

// pollReconcile runs reconcileRow until done accepts its exit code and row
// — the broker's statistics (management API) are sampled every 5 s — and
// returns that result; after 30 s it fails the test with the last one.
func pollReconcile(t *testing.T, cfg, queue string, done func(code int, row ledger.Row) bool) (int, ledger.Row, string) {
	t.Helper()
	var code int
	var row ledger.Row
	var errs string
	// Every: each look runs a whole reconcile against the management API.
	waittest.Poller{Every: 250 * time.Millisecond}.For(t, "reconcile to show "+queue+" as the test expects", func() (bool, string) {
		code, row, errs = reconcileRow(t, cfg, queue)
		return done(code, row), fmt.Sprintf("exit %d, %+v (stderr %s)", code, row, strings.TrimSpace(errs))
	})
	return code, row, errs
}

// TestReconcileWithConsumerInAnotherProcess: a consumer in a second
// process holds 50 deliveries unacknowledged in slow handlers (40
// published by lily.Publish, 10 by a plain AMQP client); 'lily reconcile'
// in this process must count them as in flight — unacked, from the
// broker — and exit 0 with lost 0, then again once they are acked.
func TestReconcileWithConsumerInAnotherProcess(t *testing.T) {
	t.Parallel()
	rabbittest.WithManagement(t) // the other processes' deliveries are counted by the management API
	ctx := context.Background()
	url, tr := dialTestRabbit(t)
	defer tr.Close()
	qc := holdQueueConfig(fmt.Sprintf("reconcile.process.%08x", rand.Uint32()))
	env := newReconcileEnv(t, url, tr, qc, "handler_timeout_millis = 120000\n")
	dir, db, cfg, st, acc := env.dir, env.db, env.cfg, env.st, env.acc
	msgs := make([]lily.Message, 40)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("lily-%d", i))
	}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	foreign := make([]amqp.Publishing, 10)
	for i := range foreign {
		foreign[i] = amqp.Publishing{Body: []byte(fmt.Sprintf("foreign-%d", i)), DeliveryMode: amqp.Persistent}
	}
	rabbittest.Publish(ctx, t, url, qc.Name, foreign...)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), holdChildQueue+"="+qc.Name, holdChildURL+"="+url, holdChildCatalog+"="+db, holdChildDir+"="+dir)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe() // closed: the release
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	released := false
	release := func() {
		if !released {
			released = true
			if err := stdin.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	childDone := false
	defer func() {
		release()
		if childDone {
			return
		}
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			child.Process.Kill()
		}
	}()
	waittest.For(t, "the child to hold 50 deliveries in its handlers", func() bool {
		started, _ := filepath.Glob(filepath.Join(dir, "*.started"))
		return len(started) == holdCount
	})
	// The broker's statistics (management API) are sampled every 5 s:
	// poll until they show the held deliveries.
	code, row, errs := pollReconcile(t, cfg, qc.Name, func(code int, row ledger.Row) bool {
		return code == 0 && row.InFlightUnacked == holdCount
	})
	want := ledger.Row{Queue: qc.Name, Accepted: holdCount, InFlight: holdCount, InFlightUnacked: holdCount}
	if code != 0 || row != want {
		t.Fatalf("reconcile while another process holds %d deliveries: exit %d, %+v, want %+v (stderr %s)", holdCount, code, row, want, strings.TrimSpace(errs))
	}
	// /healthz (lily serve) counts the same way: not degraded by the
	// other process's deliveries.
	if reasons := healthReasons(t, url, st, qc); len(reasons) != 0 {
		t.Errorf("/healthz while another process holds %d deliveries: %v", holdCount, reasons)
	}
	release()
	select {
	case err := <-exited:
		childDone = true
		if err != nil {
			t.Fatalf("consumer process: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the consumer process did not finish within 60s of the release")
	}
	code, row, errs = reconcileRow(t, cfg, qc.Name)
	want = ledger.Row{Queue: qc.Name, Accepted: holdCount, Acked: holdCount}
	if code != 0 || row != want {
		t.Errorf("reconcile after the other process acked everything: exit %d, %+v, want %+v (stderr %s)", code, row, want, strings.TrimSpace(errs))
	}
}

// TestReconcileCountsTheDeadLetterProcess: with the DLQ full, the broker's
// own delivery_limit dead letters wait in the quorum queue's at-least-once
// dead-letter process (messages_dlx). 'lily reconcile' must count them in
// flight (in_flight_dlx), not lost.
func TestReconcileCountsTheDeadLetterProcess(t *testing.T) {
	t.Parallel()
	rabbittest.WithManagement(t) // the other processes' deliveries are counted by the management API
	ctx := context.Background()
	url, tr := dialTestRabbit(t)
	defer tr.Close()
	qc := lily.QueueConfig{Name: fmt.Sprintf("reconcile.dlx.%08x", rand.Uint32()), Transport: lily.TransportRabbitMQ,
		DeliveryLimit: new(2), DLQMaxLength: new(int64(1))}.WithDefaults()
	env := newReconcileEnv(t, url, tr, qc, "delivery_limit = 2\ndlq_max_length = 1\n")
	cfg, acc := env.cfg, env.acc
	const n = 5
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("crash-%d", i))
	}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	// A consumer that dies on every message, as crash-type poison makes
	// it: each delivery is given back until the broker dead-letters the
	// message at its delivery limit. The first fills the DLQ; the others
	// wait in the dead-letter process.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	waittest.For(t, "the broker to dead-letter every message", func() bool {
		d, ok, err := ch.Get(qc.Name, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			d.Nack(false, true)
			return false
		}
		ready, err := tr.InFlight(ctx, qc.Name)
		return err == nil && ready == 0
	})
	code, row, errs := pollReconcile(t, cfg, qc.Name, func(code int, row ledger.Row) bool {
		return code == 0 && row.InFlightDLX > 0 && row.DeadLettered+row.InFlightDLX == n
	})
	// The DLQ holds one or two (a quorum queue's max-length may be passed
	// by one); the rest waits in the dead-letter process.
	held := row.DeadLettered
	want := ledger.Row{Queue: qc.Name, Accepted: n, DeadLettered: held, InFlight: n - held, InFlightDLX: n - held}
	if code != 0 || row != want || held < 1 || held > 2 {
		t.Errorf("reconcile with dead letters refused by a full DLQ: exit %d, %+v, want %+v with 1 or 2 in the DLQ (stderr %s)", code, row, want, strings.TrimSpace(errs))
	}
}

// healthReasons returns the /healthz reasons of an API server over the
// catalog, counting in flight as 'lily serve' does (the broker at url,
// with its management API).
func healthReasons(t *testing.T, url string, st *catalog.Store, qc lily.QueueConfig) []string {
	t.Helper()
	mgmt, err := rabbitmq.ManagementFor(url)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := rabbitmq.Open(context.Background(), rabbitmq.Options{URL: url, Management: mgmt})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Register(qc.Spec())
	srv, err := httpapi.New(httpapi.Options{Store: st, InFlight: tr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var h struct {
		Status  string   `json:"status"`
		Reasons []string `json:"reasons"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
		t.Fatalf("/healthz: %v: %s", err, rec.Body.String())
	}
	return h.Reasons
}

// dialTestRabbit connects to the test broker (skipping loudly without one,
// failing under CI=true) and returns its URL and the transport.
func dialTestRabbit(t *testing.T) (string, *rabbitmq.Transport) {
	t.Helper()
	url := needRabbit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return url, tr
}
