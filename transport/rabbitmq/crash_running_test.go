package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
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
	qc := crashQueueConfig(queue, lily.OrderingReorder)
	tr, err := childTransport(ctx, qc)
	if err != nil {
		return 3
	}
	return crashConsume(ctx, cancel, tr, tr, logPath, 2*time.Millisecond,
		func(d *lily.Delivery) string { return fmt.Sprintf("%s %d\n", d.EventID, d.DeliveryCount) },
		lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 20})
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
	qc := crashQueueConfig(randomName("crash.running"), lily.OrderingReorder)
	tr := openDeclared(t, qc)
	first := []lily.Message{{Body: []byte("poison")}}
	if err := lily.Publish(ctx, tr, qc.Name, first); err != nil {
		t.Fatal(err)
	}
	poison := first[0]
	// Another holder takes the poison first and keeps it unacknowledged.
	_, ch := rawChannel(t)
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
		// After 30 s without 40 lines it dies anyway: the checks below
		// then say what the consumer did.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		transporttest.Poll(wctx, func() (bool, string) {
			data, _ := os.ReadFile(logPath)
			return strings.Count(string(data), "\n") >= 40, ""
		})
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
	poisonDeadLettered(t, tr, qc.Name, poison.EventID)
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}
