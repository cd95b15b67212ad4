package azqueue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The crash tests re-execute this test binary as consumer processes that
// die on a poison message; the service (Azurite) counts the dequeues.
const (
	childQueue = "LILY_AZQUEUE_CRASH_QUEUE"
	childLog   = "LILY_AZQUEUE_CRASH_LOG"
	childPause = "LILY_AZQUEUE_CRASH_PAUSE" // a duration: each handler call takes this long
	crashLimit = 3
)

func crashQueue(name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: "azqueue", DeliveryLimit: new(crashLimit)}.WithDefaults()
}

// crashChild runs the crash-test consumer when the environment asks for
// it (and reports whether it did).
func crashChild() bool {
	queue := os.Getenv(childQueue)
	if queue == "" {
		return false
	}
	os.Exit(crashConsumer(queue, os.Getenv(childLog)))
	return true
}

// crashConsumer consumes the queue until nothing is in flight, logging each
// message it acknowledges; the body "poison" kills the process mid-handler.
func crashConsumer(queue, logPath string) int {
	tr, err := azqueue.Open(azqueue.Options{ServiceURL: azuritetest.URL(), AccountName: azqueue.DevAccountName, AccountKey: azqueue.DevAccountKey,
		VisibilityTimeout: time.Second, PollInterval: 50 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	pause, _ := time.ParseDuration(os.Getenv(childPause))
	return transporttest.CrashConsumer(tr, crashQueue(queue), logPath, pause)
}

// TestCrashPoisonCompetingConsumers: three consumer processes on one
// queue, each restarted when it dies, and a message that kills whoever
// handles it. It comes back after its visibility timeout with the
// service's DequeueCount raised — counted outside the dying process — and
// is dead-lettered with reason delivery_limit, without calling the
// handler, after exactly delivery_limit crashes. The dead consumer's other
// messages come back to whichever consumer receives next, several in one
// batch; those received beside one that runs alone are given back with
// their count (giveBack), so none reaches delivery_limit beside the
// poison. Every third message comes from a foreign producer (plain text):
// its event ID is its Storage message ID, which its give-back keeps.
func TestCrashPoisonCompetingConsumers(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	queue := fmt.Sprintf("crash-fleet-%d", time.Now().UnixNano())
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{crashQueue(queue).Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueues(context.Background(), queue) })
	msgs := make([]lily.Message, 45)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("ok-%d", i))}
	}
	const poison = 21
	msgs[poison].Body = []byte("poison")
	var lilys []lily.Message
	raw := tr.Service().NewQueueClient(azqueue.QueueName(queue))
	for i := range msgs {
		if i%3 != 0 {
			lilys = append(lilys, msgs[i])
			continue
		}
		out, err := raw.EnqueueMessage(ctx, string(msgs[i].Body), nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i].EventID = *out.Messages[0].MessageID
	}
	if err := lily.Publish(ctx, tr, queue, lilys); err != nil {
		t.Fatal(err)
	}
	for i, j := 0, 0; i < len(msgs); i++ {
		if i%3 != 0 {
			msgs[i].EventID = lilys[j].EventID
			j++
		}
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashFleet(t, 3, childQueue+"="+queue, childLog+"="+logPath, childPause+"=10ms")
	if restarts != crashLimit {
		t.Errorf("the consumers died %d times in all, want delivery_limit = %d", restarts, crashLimit)
	}
	dls, err := tr.PeekDeadLetters(ctx, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID {
		t.Fatalf("dead letters %v, want only the poison %s", ids(dls), msgs[poison].EventID)
	}
	rec, err := evidence.Decode(dls[0].Headers)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != crashLimit+1 || string(dls[0].Body) != "poison" {
		t.Errorf("poison dead-lettered with reason %s at delivery count %d, body %q; want delivery_limit at %d, body kept",
			rec.Reason, rec.DeliveryCount, dls[0].Body, crashLimit+1)
	}
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n, err := tr.InFlight(ctx, queue); err != nil || n != 0 {
		t.Errorf("%d messages left in the queue (%v), want 0", n, err)
	}
}

func ids(ds []*transport.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EventID
	}
	return out
}
