package pubsub_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/transporttest"

	"github.com/lily-mq/lily/internal/testparallel"
)

// The crash test re-executes this test binary as a consumer process that
// calls os.Exit on the poison message. pstest runs in the test process
// (it must outlive the killed consumer); the child connects to it over
// gRPC.
const (
	crashChildAddr  = "LILY_PUBSUB_CRASH_ADDR"
	crashChildQueue = "LILY_PUBSUB_CRASH_QUEUE"
	crashChildLog   = "LILY_PUBSUB_CRASH_LOG"
	crashChildTotal = "LILY_PUBSUB_CRASH_TOTAL"
	crashChildPause = "LILY_PUBSUB_CRASH_PAUSE" // a duration: each handler call takes this long
	// crashChildWant names a file with the number of log lines a child
	// must see before it stops: written by the test before it starts a
	// child again for what its predecessors left (crashLeft).
	crashChildWant = "LILY_PUBSUB_CRASH_WANT"
)

func TestMain(m *testing.M) {
	if q := os.Getenv(crashChildQueue); q != "" {
		total, _ := strconv.Atoi(os.Getenv(crashChildTotal))
		os.Exit(crashChild(os.Getenv(crashChildAddr), q, os.Getenv(crashChildLog), total))
	}
	// The tests wait on the broker far more than they compute (docs/testing.md).
	testparallel.Default(4)
	os.Exit(m.Run())
}

func crashQueueConfig(name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: lily.TransportPubSub, DeliveryLimit: new(3)}.WithDefaults()
}

// crashChild consumes; it appends the event ID of every message its
// handler processed to logPath and dies (os.Exit) on the body "poison".
// Pub/Sub cannot count what is in flight, so it stops once every other
// message is in its log and the poison is in the dead-letter subscription
// — and, run again for what its predecessors left, once the log has the
// lines the test asked for (crashLeft).
func crashChild(addr, queue, logPath string, total int) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := pubsub.Open(ctx, testOptions(addr))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	qc := crashQueueConfig(queue)
	tr.Register(qc.Spec())
	want := 0 // the log lines to see; absent: none
	if data, err := os.ReadFile(os.Getenv(crashChildWant)); err == nil {
		if want, err = strconv.Atoi(string(data)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 3
	}
	pause, _ := time.ParseDuration(os.Getenv(crashChildPause))
	var mu sync.Mutex
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(transporttest.CrashExitCode) // the process dies mid-handler: no catch block sees it
		}
		time.Sleep(pause) // simulates the handler's work
		mu.Lock()
		defer mu.Unlock()
		logf.WriteString(d.EventID + "\n")
		return logf.Sync()
	}), lily.ConsumerOptions{Queue: qc, Instance: "crash-consumer", Concurrency: 2, Prefetch: 10,
		ReceiveWait: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		return 3
	}
	go func() {
		// Stop once the work is done; say what is missing after 90 s
		// instead of hanging the test.
		wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
		defer wcancel()
		done, _ := transporttest.Poll(wctx, func() (bool, string) {
			data, _ := os.ReadFile(logPath)
			lines := strings.Fields(string(data))
			seen := map[string]bool{}
			for _, id := range lines {
				seen[id] = true
			}
			if len(seen) < total-1 || len(lines) < want {
				return false, ""
			}
			dls, err := tr.DeadLetters(ctx, queue)
			return err == nil && len(dls) > 0, ""
		})
		switch {
		case done:
			cancel()
		case ctx.Err() == nil:
			data, _ := os.ReadFile(logPath)
			dls, err := tr.DeadLetters(ctx, queue)
			fmt.Fprintf(os.Stderr, "crash child %d: gave up after 90s: %d log lines, %d dead letters (%v)\n", os.Getpid(), len(strings.Fields(string(data))), len(dls), err)
			for _, d := range dls {
				r, _ := evidence.Decode(d.Headers)
				fmt.Fprintf(os.Stderr, "  dead letter %s %s: %s count %d\n", d.EventID, d.Body, r.Reason, r.DeliveryCount)
			}
			os.Exit(4)
		}
	}()
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	tr.Close()
	return 0
}

// crashLeft counts, once the crash children ended, the messages no one
// acknowledged (pstest's records, exact). A child stops once every ID is
// in the log, and a dead child logs a message before its ack is sent: its
// window comes back only when the ack deadline passes, after the last
// child may have stopped (seen: 6 unacknowledged after the run). So when
// some are left, it asks the next child, through the file it returns, to
// see one more log line for each of them before it stops.
func crashLeft(t *testing.T, srv *pstest.Server, tr *pubsub.Transport, queue, logPath string) (func() (int64, error), string) {
	wantPath := filepath.Join(t.TempDir(), "want")
	return func() (int64, error) {
		n := inFlight(srv, tr, queue)
		if n == 0 {
			return 0, nil
		}
		data, err := os.ReadFile(logPath)
		if err != nil {
			return n, err
		}
		want := len(strings.Fields(string(data))) + int(n)
		return n, os.WriteFile(wantPath, []byte(strconv.Itoa(want)), 0o644)
	}, wantPath
}

// TestCrashTypePoison runs a consumer subprocess that calls os.Exit on one
// message, restarts it each time it dies, and checks that the message
// lands in Lily's dead-letter topic with reason delivery_limit after
// delivery_limit restarts — counted by the subscription's delivery attempt,
// which the killed process cannot forget — while its neighbours are
// processed, none dead-lettered with it.
func TestCrashTypePoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	tr := open(t, srv)
	qc := crashQueueConfig(fmt.Sprintf("crash.poison.%08x", rand.Uint32()))
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 30)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("order-%d", i))}
	}
	const poison = 13
	msgs[poison].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	left, wantPath := crashLeft(t, srv, tr, qc.Name, logPath)
	restarts := transporttest.RunCrashChildrenDrained(t, left, crashChildAddr+"="+srv.Addr, crashChildQueue+"="+qc.Name,
		crashChildLog+"="+logPath, crashChildTotal+"="+strconv.Itoa(len(msgs)), crashChildWant+"="+wantPath)
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	dls, err := tr.DeadLetters(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID || string(dls[0].Body) != "poison" {
		t.Fatalf("dead-letter subscription holds %d messages, want exactly the poison", len(dls))
	}
	rec, err := evidence.Decode(dls[0].Headers)
	if err != nil {
		t.Errorf("evidence: %v", err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != qc.Settings().DeliveryLimit+1 {
		t.Errorf("reason %q delivery count %d, want delivery_limit and %d", rec.Reason, rec.DeliveryCount, qc.Settings().DeliveryLimit+1)
	}
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n := inFlight(srv, tr, qc.Name); n != 0 {
		t.Errorf("%d messages unacknowledged after the run, want 0", n)
	}
	t.Logf("%d restarts; poison dead-lettered with delivery count %d", restarts, rec.DeliveryCount)
}

// TestCrashTypePoisonCompetingConsumers is TestCrashTypePoison with three
// consumer processes on the subscription at once, each restarted when it
// dies: a death leaves the dead consumer's pulled messages to come back,
// their delivery attempts raised, to whichever consumer pulls next,
// mid-stream. The consumers die exactly delivery_limit times in all, the
// poison alone is dead-lettered, and every other message is processed.
func TestCrashTypePoisonCompetingConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	tr := open(t, srv)
	qc := crashQueueConfig(fmt.Sprintf("crash.fleet.%08x", rand.Uint32()))
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
	left, wantPath := crashLeft(t, srv, tr, qc.Name, logPath)
	restarts := transporttest.RunCrashFleetDrained(t, 3, left, crashChildAddr+"="+srv.Addr, crashChildQueue+"="+qc.Name,
		crashChildLog+"="+logPath, crashChildTotal+"="+strconv.Itoa(len(msgs)), crashChildPause+"=10ms", crashChildWant+"="+wantPath)
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("the consumers died %d times in all, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	dls, err := tr.DeadLetters(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID {
		for _, d := range dls {
			r, _ := evidence.Decode(d.Headers)
			t.Logf("dead letter %s %s: reason %s, count %d", d.EventID, d.Body, r.Reason, r.DeliveryCount)
		}
		t.Fatalf("dead-letter subscription holds %d messages, want exactly the poison", len(dls))
	}
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n := inFlight(srv, tr, qc.Name); n != 0 {
		t.Errorf("%d messages unacknowledged after the run, want 0", n)
	}
}
