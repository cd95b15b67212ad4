package rabbitmq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// The crash test re-executes this test binary as a consumer process that
// calls os.Exit on the poison message.
const (
	crashChildQueue = "LILY_RMQ_CRASH_QUEUE"
	crashChildLog   = "LILY_RMQ_CRASH_LOG"
)

func TestMain(m *testing.M) {
	if q := os.Getenv(crashChildQueue); q != "" {
		os.Exit(crashChild(q, os.Getenv(crashChildLog)))
	}
	os.Exit(m.Run())
}

func crashQueueConfig(name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: lily.TransportRabbitMQ, DeliveryLimit: 3}.WithDefaults()
}

// crashChild consumes until nothing is left; it appends every processed
// event ID to logPath and dies (os.Exit) on the body "poison".
func crashChild(queue, logPath string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: brokerURL()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	qc := crashQueueConfig(queue)
	tr.Register(qc.Spec())
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 3
	}
	var mu sync.Mutex
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(7) // the process dies mid-handler: no catch block sees it
		}
		// Processed: logged before the ack, so a death between the two
		// logs it twice (redelivered), never not at all.
		mu.Lock()
		defer mu.Unlock()
		logf.WriteString(d.EventID + "\n")
		return logf.Sync()
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 10, ReceiveWait: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 3
	}
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			if n, err := tr.InFlight(ctx, queue); err == nil && n == 0 {
				cancel()
				return
			}
		}
	}()
	if err := c.Run(ctx); err != nil {
		return 3
	}
	return 0
}

// TestCrashTypePoison runs a consumer subprocess that calls os.Exit on one
// message, restarts it each time it dies, and checks that the broker
// dead-letters the poison at the delivery limit (x-death delivery_limit)
// while every message behind it is processed.
func TestCrashTypePoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := open(t)
	defer tr.Close()
	qc := crashQueueConfig(fmt.Sprintf("crash.poison.%08x", rand.Uint32()))
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	defer tr.DeleteQueues(ctx, qc.Spec())
	msgs := make([]lily.Message, 30)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("order-%d", i))
	}
	msgs[3].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := 0
	for {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildQueue+"="+qc.Name, crashChildLog+"="+logPath)
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		if err == nil {
			break
		}
		if cmd.ProcessState.ExitCode() != 7 {
			t.Fatalf("consumer process failed (not the poison's exit): %v", err)
		}
		restarts++
		if restarts > 10 {
			t.Fatalf("consumer died %d times: the poison is not bounded by the delivery limit", restarts)
		}
	}
	if restarts != qc.DeliveryLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, qc.DeliveryLimit)
	}
	dls, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(qc.Name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[3].EventID || string(dls[0].Body) != "poison" {
		t.Fatalf("dead-letter queue holds %d messages, want exactly the poison", len(dls))
	}
	if r, ok := evidence.BrokerReason(dls[0].Headers); !ok || r != evidence.ReasonDeliveryLimit {
		t.Errorf("broker dead-letter reason %q (%v), want delivery_limit", r, ok)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for _, id := range strings.Fields(string(data)) {
		acked[id] = true
	}
	// Conservation: every message but the poison acked, none invented.
	for i, m := range msgs {
		if i != 3 && !acked[m.EventID] {
			t.Errorf("message %d (%s) was not processed", i, m.Body)
		}
	}
	if acked[msgs[3].EventID] || len(acked) != len(msgs)-1 {
		t.Errorf("acked %d distinct messages, want %d (all but the poison)", len(acked), len(msgs)-1)
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}
