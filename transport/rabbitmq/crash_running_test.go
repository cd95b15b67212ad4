package rabbitmq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// crashCountsLog: set, the crash child is runningChild, which logs
// "<event ID> <delivery count>" lines there.
const crashCountsLog = "LILY_RMQ_CRASH_COUNTS"

// runningChild consumes queue with a full prefetch window and handlers
// that take a little time, logs each processed event with its delivery
// count, and dies (os.Exit) on the body "poison".
func runningChild(queue, logPath string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: brokerURL()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	qc := crashQueueConfig(queue, lily.OrderingReorder)
	tr.Register(qc.Spec())
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 3
	}
	var mu sync.Mutex
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(transporttest.CrashExitCode)
		}
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(logf, "%s %d\n", d.EventID, d.DeliveryCount)
		return logf.Sync()
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 20, ReceiveWait: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 3
	}
	go transporttest.CancelWhenIdle(ctx, tr, queue, 50*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		return 3
	}
	return 0
}

// TestCrashWhileRunning: a consumer has been running with a full prefetch
// window when the poison comes back mid-stream as a redelivery (another
// holder's channel closed). The consumer processes and settles the
// first-time deliveries the broker had pushed before it runs the poison
// alone, so that when the poison kills the process nothing else is in
// flight: every other message is processed exactly as a first delivery
// (count 1), the poison is dead-lettered by the broker at its delivery
// limit, and nothing is lost.
func TestCrashWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := open(t)
	defer tr.Close()
	qc := crashQueueConfig(fmt.Sprintf("crash.running.%08x", rand.Uint32()), lily.OrderingReorder)
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	defer tr.DeleteQueues(ctx, qc.Spec())
	first := []lily.Message{{Body: []byte("poison")}}
	if err := lily.Publish(ctx, tr, qc.Name, first); err != nil {
		t.Fatal(err)
	}
	poison := first[0]
	// Another holder takes the poison first and keeps it unacknowledged.
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if d, ok, err := ch.Get(qc.Name, false); err != nil || !ok || string(d.Body) != "poison" {
		t.Fatalf("basic.get of the poison: ok %v err %v", ok, err)
	}
	msgs := make([]lily.Message, 300)
	for i := range msgs {
		msgs[i].Body = fmt.Appendf(nil, "order-%d", i)
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "counts.log")
	// Once the consumer has been running a while, the other holder dies:
	// the poison comes back, mid-stream, with its count raised.
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if data, _ := os.ReadFile(logPath); strings.Count(string(data), "\n") >= 40 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		ch.Close()
	}()
	restarts := transporttest.RunCrashChildren(t, crashChildQueue+"="+qc.Name, crashCountsLog+"="+logPath)
	if restarts < 1 {
		t.Fatalf("the consumer never died on the poison (restarts %d)", restarts)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		id, count, _ := strings.Cut(line, " ")
		n, _ := strconv.Atoi(count)
		if n != 1 {
			t.Errorf("event %s processed with delivery count %d: a first-time delivery was in flight with the poison", id, n)
		}
		seen[id]++
	}
	for i, m := range msgs {
		if seen[m.EventID] != 1 {
			t.Errorf("message %d (%s) processed %d times, want 1", i, m.Body, seen[m.EventID])
		}
	}
	dls, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(qc.Name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != poison.EventID {
		t.Fatalf("dead-letter queue holds %d messages, want exactly the poison", len(dls))
	}
	if r, ok := evidence.BrokerReason(dls[0].Headers); !ok || r != evidence.ReasonDeliveryLimit {
		t.Errorf("broker dead-letter reason %q (%v), want delivery_limit", r, ok)
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}
