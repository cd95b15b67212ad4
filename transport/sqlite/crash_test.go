package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/soaktest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The crash test re-executes this test binary as a child process: a
// consumer or a publisher that the parent kills with SIGKILL.
const (
	childRole = "LILY_SQLITE_CRASH_CHILD" // "consume" or "publish"
	childDB   = "LILY_SQLITE_CRASH_DB"
	childLog  = "LILY_SQLITE_CRASH_LOG" // publisher: confirmed event IDs
	childStop = "LILY_SQLITE_CRASH_STOP_WHEN_QUIET"
	crashQ    = "crash.orders"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childRole) {
	case "consume":
		os.Exit(crashConsumer(os.Getenv(childDB)))
	case "publish":
		os.Exit(crashPublisher(os.Getenv(childDB), os.Getenv(childLog)))
	case "poison":
		os.Exit(poisonConsumer(os.Getenv(childDB), os.Getenv(childLog)))
	}
	os.Exit(m.Run())
}

func crashQueue() lily.QueueConfig {
	return lily.QueueConfig{Name: crashQ, RetryAttempts: 2, RetryBackoffMillis: new(int64(5)), MaxRetryBackoffMillis: new(int64(10)), DeliveryLimit: new(50)}.WithDefaults()
}

func openCrashDB(path string) (*sqlite.Transport, error) {
	return sqlite.Open(context.Background(), path, sqlite.Options{VisibilityTimeout: 300 * time.Millisecond, PollInterval: 5 * time.Millisecond})
}

// crashConsumer consumes until nothing is in flight. Bodies ending in
// "/permanent" fail permanently, "/flaky" fail once.
func crashConsumer(db string) int {
	tr, err := openCrashDB(db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		time.Sleep(50 * time.Microsecond) // simulates a handler's work
		switch {
		case strings.HasSuffix(string(d.Body), "/permanent"):
			return lily.Permanent(errors.New("bad order"))
		case strings.HasSuffix(string(d.Body), "/flaky") && d.RetryCount == 0:
			return errors.New("blip")
		}
		return nil
	}), lily.ConsumerOptions{Queue: crashQueue(), Concurrency: 4, Prefetch: 128, ReceiveWait: 20 * time.Millisecond,
		Instance: fmt.Sprintf("crash-%d", os.Getpid()),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if os.Getenv(childStop) == "1" { // else runs until killed
		go transporttest.CancelWhenIdle(ctx, tr, crashQ, 20*time.Millisecond, cancel)
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// crashPublisher publishes batches of 50 forever, appending each batch's
// event IDs to the log file (fsynced) only after Publish confirmed it.
func crashPublisher(db, logPath string) int {
	tr, err := openCrashDB(db)
	if err != nil {
		return 3
	}
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return 3
	}
	for b := 0; ; b++ {
		msgs := make([]lily.Message, 50)
		for i := range msgs {
			kind := []string{"ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "permanent", "flaky"}[(b+i)%10]
			msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("pub-%d-%d/%s", b, i, kind))}
		}
		if err := lily.Publish(context.Background(), tr, crashQ, msgs); err != nil {
			return 3
		}
		var sb strings.Builder
		for _, m := range msgs {
			sb.WriteString(m.EventID + "\n")
		}
		f.WriteString(sb.String())
		f.Sync()
	}
}

func startChild(t *testing.T, role, db, logPath string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRole+"="+role, childDB+"="+db, childLog+"="+logPath)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestKill9 kills consumer and publisher subprocesses with SIGKILL at random
// moments, again and again, then lets a last consumer finish and proves that
// every message whose publish was confirmed is acknowledged or
// dead-lettered exactly as its kind demands, and that the ledger balances.
func TestKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, logPath := filepath.Join(dir, "crash.db"), filepath.Join(dir, "published.log")
	tr, err := openCrashDB(db)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{crashQueue().Spec()}}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(42, 42))
	// Six rounds kill each side mid-flow under both recoveries (leases
	// given back, leases expired) three times each; the soak run kills 24
	// times.
	rounds := soaktest.Pick(6, 24)
	for i := range rounds {
		pub := startChild(t, "publish", db, logPath)
		con := startChild(t, "consume", db, logPath)
		// Kill mid-flow: once the publisher has confirmed more batches,
		// after a random extra moment.
		before := len(readLines(t, logPath))
		transporttest.WaitWithin(t, time.Minute, fmt.Sprintf("round %d: 100 more confirmed publishes", i), func() (bool, string) {
			n := len(readLines(t, logPath))
			return n >= before+100, fmt.Sprintf("%d confirmed, %d before the round", n, before)
		})
		time.Sleep(time.Duration(r.IntN(60)) * time.Millisecond) // simulates a crash at a random moment of the flow
		for _, c := range []*exec.Cmd{pub, con} {
			c.Process.Signal(syscall.SIGKILL)
			err := c.Wait()
			if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				t.Fatalf("round %d: child %v ended before it was killed: %v", i, c.Args, err)
			}
		}
		if i%2 == 0 {
			// Half the rounds a supervisor gives the dead consumer's
			// leases back; the other half they expire.
			tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: fmt.Sprintf("crash-%d", con.Process.Pid)})
		}
	}
	final := startChild(t, "consume", db, logPath, childStop+"=1")
	if err := final.Wait(); err != nil {
		t.Fatalf("final consumer: %v", err)
	}

	confirmed := readLines(t, logPath)
	if len(confirmed) < 500 {
		t.Fatalf("only %d messages confirmed in %d rounds: the test did not exercise much", len(confirmed), rounds)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger: %v %v", rows, err)
	}
	led := rows[0]
	t.Logf("confirmed %d, ledger %+v", len(confirmed), led)
	if led.Lost != 0 || led.InFlight != 0 {
		t.Errorf("ledger does not balance: %+v", led)
	}
	// A publish killed between its commit and the log write is accepted
	// but not in the log: never the other way round.
	if led.Accepted < int64(len(confirmed)) {
		t.Errorf("accepted %d < %d confirmed publishes: a confirmed publish was lost", led.Accepted, len(confirmed))
	}
	dead := map[string]string{}
	err = cat.Each(ctx, catalog.Filter{Queue: crashQ}, func(e *catalog.Entry) error {
		if prev, dup := dead[e.EventID]; dup {
			t.Errorf("event %s dead-lettered twice (%s, %s)", e.EventID, prev, e.Reason)
		}
		dead[e.EventID] = e.Reason
		if !strings.HasSuffix(string(e.Body), "/permanent") || e.Reason != "permanent" {
			t.Errorf("event %s (%s) dead-lettered with reason %s", e.EventID, e.Body, e.Reason)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if led.DeadLettered != int64(len(dead)) || led.Acked+led.DeadLettered != led.Accepted {
		t.Errorf("acked %d + dead-lettered %d != accepted %d", led.Acked, led.DeadLettered, led.Accepted)
	}
	// Every confirmed permanent message is in the catalog.
	for _, id := range confirmed {
		if _, ok := dead[id]; ok {
			continue
		}
		var n int
		if err := tr.DB().QueryRow(`SELECT COUNT(*) FROM lily_messages WHERE event_id = ?`, id).Scan(&n); err != nil || n != 0 {
			t.Errorf("confirmed event %s still queued (%d, %v)", id, n, err)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); len(line) == 36 {
			out = append(out, line)
		}
	}
	return out
}

// poisonQueue is the queue of the competing-consumer crash test.
func poisonQueue() lily.QueueConfig {
	return lily.QueueConfig{Name: "crash.poison", DeliveryLimit: new(3)}.WithDefaults()
}

// poisonConsumer consumes poisonQueue until nothing is in flight; every
// handler call takes 10 ms and appends the event ID to logPath, and the
// body "poison" kills the process mid-handler.
func poisonConsumer(db, logPath string) int {
	tr, err := openCrashDB(db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 3
	}
	var mu sync.Mutex
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(transporttest.CrashExitCode) // no recover sees it
		}
		time.Sleep(10 * time.Millisecond) // simulates a handler's work
		mu.Lock()
		defer mu.Unlock()
		logf.WriteString(d.EventID + "\n")
		return logf.Sync()
	}), lily.ConsumerOptions{Queue: poisonQueue(), Concurrency: 2, Prefetch: 10, ReceiveWait: 20 * time.Millisecond,
		Instance: fmt.Sprintf("poison-%d", os.Getpid()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go transporttest.CancelWhenIdle(ctx, tr, poisonQueue().Name, 20*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// TestCrashTypePoisonCompetingConsumers runs three consumer processes on
// one queue of one database file at once, each restarted when it dies on
// a message that kills its process: a dead consumer's leases run out and
// its batch is leased again, counted, by the others mid-stream. The
// consumers die exactly delivery_limit times in all, the poison alone is
// dead-lettered (reason delivery_limit, without a handler), every other
// message is acknowledged, and the ledger balances.
func TestCrashTypePoisonCompetingConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "poison.db")
	tr, err := openCrashDB(db)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	qc := poisonQueue()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 60)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("order-%d", i))}
	}
	const poison = 21
	msgs[poison].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashFleet(t, 3, childRole+"=poison", childDB+"="+db, childLog+"="+logPath)
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("the consumers died %d times in all, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	var dead []*catalog.Entry
	if err := cat.Each(ctx, catalog.Filter{Queue: qc.Name}, func(e *catalog.Entry) error { dead = append(dead, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].EventID != msgs[poison].EventID || dead[0].Reason != "delivery_limit" {
		for _, e := range dead {
			t.Logf("dead letter %s %q: %s", e.EventID, e.Body, e.Reason)
		}
		t.Fatalf("%d dead letters, want exactly the poison with reason delivery_limit", len(dead))
	}
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil || len(rows) != 1 || rows[0].Lost != 0 || rows[0].InFlight != 0 || rows[0].Acked != int64(len(msgs)-1) || rows[0].DeadLettered != 1 {
		t.Errorf("ledger %+v (%v): want %d acked, 1 dead-lettered, nothing in flight or lost", rows, err, len(msgs)-1)
	}
}
