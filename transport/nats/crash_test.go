package nats_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
	"github.com/lily-mq/lily/transport/transporttest"

	"github.com/lily-mq/lily/internal/testparallel"
)

// The crash tests re-execute this test binary as consumer processes that
// die on a poison message; the server keeps the delivery counts.
const (
	childURL   = "LILY_NATS_CRASH_URL"
	childQueue = "LILY_NATS_CRASH_QUEUE"
	childLog   = "LILY_NATS_CRASH_LOG"
	childPause = "LILY_NATS_CRASH_PAUSE" // a duration: each handler call takes this long
	childLimit = "LILY_NATS_CRASH_LIMIT" // the queue's delivery_limit, when not crashLimit
	crashLimit = 3
	// crashAckWait is the children's lease: what a dead child held comes
	// back after it.
	crashAckWait = time.Second
)

func TestMain(m *testing.M) {
	if u := os.Getenv(childURL); u != "" {
		os.Exit(crashConsumer(u, os.Getenv(childQueue), os.Getenv(childLog)))
	}
	// The tests wait on the broker far more than they compute (docs/testing.md).
	testparallel.Default(4)
	os.Exit(m.Run())
}

func crashQueue(name string) lily.QueueConfig {
	limit := crashLimit
	if n, err := strconv.Atoi(os.Getenv(childLimit)); err == nil {
		limit = n
	}
	return lily.QueueConfig{Name: name, Transport: "nats", DeliveryLimit: new(limit)}.WithDefaults()
}

// crashConsumer consumes the queue until nothing is in flight, logging each
// message it acknowledges; the body "poison" kills the process mid-handler,
// a body ending in "/permanent" fails permanently.
func crashConsumer(url, queue, logPath string) int {
	tr, err := nats.Open(nats.Options{URL: url, AckWait: crashAckWait, MaxWait: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	pause, _ := time.ParseDuration(os.Getenv(childPause))
	return transporttest.CrashConsumer(tr, crashQueue(queue), logPath, pause)
}

// declareCrash declares a fresh crash-test queue, deleted when the test
// ends.
func declareCrash(t *testing.T, tr *nats.Transport, prefix string) lily.QueueConfig {
	t.Helper()
	qc := crashQueue(fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()))
	ctx := context.Background()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.DeleteQueue(context.Background(), qc.Spec()); err != nil {
			t.Errorf("delete %s: %v", qc.Name, err)
		}
	})
	return qc
}

// checkCrashOutcome: the poison alone is dead-lettered, with reason
// delivery_limit at delivery_limit+1, every other message processed, and
// nothing left in flight.
func checkCrashOutcome(t *testing.T, tr *nats.Transport, queue, logPath string, msgs []lily.Message, poison int) {
	t.Helper()
	ctx := context.Background()
	dls, err := tr.PeekDeadLetters(ctx, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID {
		ids := make([]string, len(dls))
		for i, d := range dls {
			ids[i] = d.EventID
		}
		t.Fatalf("dead letters %v, want only the poison %s", ids, msgs[poison].EventID)
	}
	rec, err := evidence.Decode(dls[0].Headers)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != crashLimit+1 {
		t.Errorf("poison dead-lettered with reason %s at delivery count %d, want delivery_limit at %d", rec.Reason, rec.DeliveryCount, crashLimit+1)
	}
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n, err := tr.InFlight(ctx, queue); err != nil || n != 0 {
		t.Errorf("%d messages in flight after the run (%v), want 0", n, err)
	}
}

// TestCrashPoisonByNumDelivered: a message that kills its consumer process
// comes back after AckWait with NumDelivered raised — counted by the
// server, outside the dying process — and is dead-lettered with reason
// delivery_limit, without calling the handler, after exactly
// delivery_limit crashes. Its 19 neighbours, pulled in the same batches and
// redelivered with it, are all acknowledged, none dead-lettered.
func TestCrashPoisonByNumDelivered(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	tr := open(t)
	qc := declareCrash(t, tr, "crash")
	msgs := make([]lily.Message, 20)
	for i := range msgs {
		msgs[i] = lily.Message{Body: fmt.Appendf(nil, "ok-%d", i)}
	}
	msgs[3].Body = []byte("poison")
	if err := lily.Publish(context.Background(), tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashChildren(t, childURL+"="+url, childQueue+"="+qc.Name, childLog+"="+logPath)
	if restarts != crashLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, crashLimit)
	}
	checkCrashOutcome(t, tr, qc.Name, logPath, msgs, 3)
}

// TestCrashPoisonCompetingConsumers is TestCrashPoisonByNumDelivered with
// three consumer processes on the queue at once, each restarted when it
// dies, and every third message from a producer that is not Lily's (no
// event ID: its ID is its place in the stream, which a give-back copy
// keeps). A death leaves the dead consumer's messages to come back after
// AckWait, counts raised, to whichever consumer pulls next, several in one
// batch: the redeliveries pulled beside one that runs alone are given back
// as copies carrying their count. The consumers die exactly
// delivery_limit times in all, the poison alone is dead-lettered, and
// every other message is processed once.
func TestCrashPoisonCompetingConsumers(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	tr := open(t)
	qc := declareCrash(t, tr, "crash-fleet")
	ctx := context.Background()
	msgs := make([]lily.Message, 60)
	for i := range msgs {
		msgs[i] = lily.Message{Body: fmt.Appendf(nil, "ok-%d", i)}
	}
	const poison = 21
	msgs[poison].Body = []byte("poison")
	var raw []transporttest.ForeignMessage
	var lilys []lily.Message
	for i := range msgs {
		if i%3 == 0 {
			raw = append(raw, transporttest.ForeignMessage{Body: msgs[i].Body, Headers: map[string]any{"amount": "12.50"}})
		} else {
			lilys = append(lilys, msgs[i])
		}
	}
	before := streamLast(t, tr, qc.Name)
	rawPublish(ctx, t, url, qc.Name, raw)
	if err := lily.Publish(ctx, tr, qc.Name, lilys); err != nil {
		t.Fatal(err)
	}
	for i, j, k := 0, 0, 0; i < len(msgs); i++ {
		if i%3 == 0 {
			msgs[i].EventID = fmt.Sprintf("%s:%d", nats.StreamName(qc.Name), before+uint64(k)+1)
			k++
		} else {
			msgs[i].EventID = lilys[j].EventID
			j++
		}
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashFleet(t, 3, childURL+"="+url, childQueue+"="+qc.Name, childLog+"="+logPath, childPause+"=10ms")
	if restarts != crashLimit {
		t.Errorf("the consumers died %d times in all, want delivery_limit = %d", restarts, crashLimit)
	}
	checkCrashOutcome(t, tr, qc.Name, logPath, msgs, poison)
}

// streamLast is the last sequence of queue's stream.
func streamLast(t *testing.T, tr *nats.Transport, queue string) uint64 {
	t.Helper()
	s, err := tr.JetStream().Stream(context.Background(), nats.StreamName(queue))
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}
