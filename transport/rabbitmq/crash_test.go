package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"

	"github.com/lily-mq/lily/internal/testparallel"
)

// The crash test re-executes this test binary as a consumer process that
// calls os.Exit on the poison message.
const (
	crashChildQueue   = "LILY_RMQ_CRASH_QUEUE"
	crashChildLog     = "LILY_RMQ_CRASH_LOG"
	crashChildCatalog = "LILY_RMQ_CRASH_CATALOG" // set: ordering park, held keys in this catalog
	crashChildPause   = "LILY_RMQ_CRASH_PAUSE"   // a duration: each handler call takes this long
)

func TestMain(m *testing.M) {
	if q, l := os.Getenv(crashChildQueue), os.Getenv(crashCountsLog); q != "" && l != "" {
		os.Exit(runningChild(q, l))
	}
	if q := os.Getenv(crashChildQueue); q != "" {
		os.Exit(crashChild(q, os.Getenv(crashChildLog), os.Getenv(crashChildCatalog)))
	}
	if role := os.Getenv(fleetRole); role != "" { // fleet_test.go
		os.Exit(fleetChild(role, os.Getenv(fleetQueue), os.Getenv(fleetCatalog), os.Getenv(fleetDir)))
	}
	// The tests wait on the broker far more than they compute (docs/testing.md).
	testparallel.Default(4)
	os.Exit(m.Run())
}

func crashQueueConfig(name, ordering string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: lily.TransportRabbitMQ, DeliveryLimit: new(3), Ordering: ordering}.WithDefaults()
}

// crashChild consumes until nothing is left; it appends every processed
// event ID to logPath and dies (os.Exit) on the body "poison". With a
// catalog path, the queue's ordering is park and held keys are kept there.
func crashChild(queue, logPath, catalogPath string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qc := crashQueueConfig(queue, lily.OrderingReorder)
	tr, err := childTransport(ctx, qc)
	if err != nil {
		return 3
	}
	var consumed transport.Transport = tr
	var keys lily.KeyStore
	if catalogPath != "" {
		qc = crashQueueConfig(queue, lily.OrderingPark)
		cat, err := catalog.Open(ctx, catalogPath)
		if err != nil {
			return 3
		}
		defer cat.Close()
		consumed, keys = ledger.Account(tr, ledger.New(cat)), redrive.NewKeys(cat)
	}
	pause, _ := time.ParseDuration(os.Getenv(crashChildPause))
	return crashConsume(ctx, cancel, tr, consumed, logPath, pause, func(d *lily.Delivery) string { return d.EventID + "\n" },
		lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 10, Keys: keys})
}

// childTransport is the transport of a child process: the broker's, with
// qc registered (its topology is declared by the parent). When it cannot
// connect it says why on stderr.
func childTransport(ctx context.Context, qc lily.QueueConfig) (*rabbitmq.Transport, error) {
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: brokerURL()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, err
	}
	tr.Register(qc.Spec())
	return tr, nil
}

// crashConsume is the consuming part of a crash child: a consumer on
// consumed (tr, or tr through a catalog's ledger) with opts, its receive
// wait and logger filled in, runs until tr's queue is idle. The handler
// dies (os.Exit) on the body "poison"; on any other it waits pause and
// appends line(d) to logPath — before the ack, so a death between the two
// logs it twice (redelivered), never not at all.
func crashConsume(ctx context.Context, cancel context.CancelFunc, tr *rabbitmq.Transport, consumed transport.Transport,
	logPath string, pause time.Duration, line func(*lily.Delivery) string, opts lily.ConsumerOptions) int {
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 3
	}
	var mu sync.Mutex
	opts.ReceiveWait, opts.Logger = 20*time.Millisecond, quiet()
	c, err := lily.NewConsumer(consumed, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(transporttest.CrashExitCode) // the process dies mid-handler: no catch block sees it
		}
		if pause > 0 {
			time.Sleep(pause) // simulates the handler's work
		}
		mu.Lock()
		defer mu.Unlock()
		logf.WriteString(line(d))
		return logf.Sync()
	}), opts)
	if err != nil {
		return 3
	}
	go transporttest.CancelWhenIdle(ctx, tr, opts.Queue.Name, 50*time.Millisecond, cancel)
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
	qc := crashQueueConfig(randomName("crash.poison"), lily.OrderingReorder)
	tr := openDeclared(t, qc)
	msgs := make([]lily.Message, 30)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("order-%d", i))
	}
	msgs[3].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := runCrashChildren(t, qc.Name, logPath, "")
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	poisonDeadLettered(t, tr, qc.Name, msgs[3].EventID)
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, 3)
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}

// poisonDeadLettered checks that queue's dead-letter queue holds exactly
// the poison (event poisonID), dead-lettered by the broker at its delivery
// limit.
func poisonDeadLettered(t *testing.T, tr *rabbitmq.Transport, queue, poisonID string) {
	t.Helper()
	dls, err := tr.Peek(context.Background(), &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(queue)})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != poisonID || string(dls[0].Body) != "poison" {
		for _, d := range dls {
			r, _ := evidence.BrokerReason(d.Headers)
			t.Logf("dead letter %s %q: broker reason %q, headers %v", d.EventID, d.Body, r, d.Headers)
		}
		t.Fatalf("dead-letter queue holds %d messages, want exactly the poison", len(dls))
	}
	if r, ok := evidence.BrokerReason(dls[0].Headers); !ok || r != evidence.ReasonDeliveryLimit {
		t.Errorf("broker dead-letter reason %q (%v), want delivery_limit", r, ok)
	}
}

// runCrashChildren runs consumer subprocesses one after the other until one
// ends normally and returns how many died on the poison.
func runCrashChildren(t *testing.T, queue, logPath, catalogPath string) int {
	t.Helper()
	tr := open(t)
	defer tr.Close()
	tr.Register(crashQueueConfig(queue, lily.OrderingReorder).Spec())
	return transporttest.RunCrashChildrenDrained(t, crashLeft(tr, queue), crashChildQueue+"="+queue, crashChildLog+"="+logPath, crashChildCatalog+"="+catalogPath)
}

// crashLeft counts what queue still holds once its crash children ended:
// exact when no consumer is registered; a consumer still registered (a
// dead child whose death the broker has not processed yet) may hold a
// window no count shows, so it counts as one more message to look for.
func crashLeft(tr *rabbitmq.Transport, queue string) func() (int64, error) {
	return func() (int64, error) {
		p, err := tr.InFlightParts(context.Background(), queue)
		if p.Unknown != "" {
			return p.Total() + 1, err
		}
		return p.Total(), err
	}
}

// TestCrashTypePoisonParksItsKey is TestCrashTypePoison with ordering park
// and keyed messages: the poison kills its consumer until the broker
// dead-letters it at the delivery limit — without the consumer ever seeing
// it fail — and still its key's later messages wait behind it (the key was
// held before the redelivered poison ran), while the other keys are
// processed. Unparked with the fix deployed, the key's messages are
// processed in publish order, and the ledger balances.
func TestCrashTypePoisonParksItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw := open(t)
	defer raw.Close()
	catPath := filepath.Join(t.TempDir(), "catalog.db")
	cat, err := catalog.Open(ctx, catPath)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	tr := ledger.Account(raw, ledger.New(cat))
	qc := crashQueueConfig(randomName("crash.park"), lily.OrderingPark)
	declared(t, tr, qc)
	const keys = 5
	msgs := make([]lily.Message, 30)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i%keys), Body: fmt.Appendf(nil, "order-%d", i)}
	}
	msgs[3].Body = []byte("poison") // key k3; k3's later messages: 8, 13, 18, 23, 28
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	if restarts := runCrashChildren(t, qc.Name, logPath, catPath); restarts != qc.Settings().DeliveryLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	acked := transporttest.ReadIDs(t, logPath)
	for i, m := range msgs {
		if want := i%keys != 3; acked[m.EventID] != want {
			t.Errorf("message %d (key %s) processed = %v, want %v", i, m.Key, acked[m.EventID], want)
		}
	}
	if _, err := cat.Ingest(ctx, tr, qc.Name); err != nil {
		t.Fatal(err)
	}
	held, err := redrive.NewKeys(cat).HeldKeys(ctx, qc.Name)
	if err != nil || len(held) != 1 || held[0].Key != "k3" || held[0].HeadEventID != msgs[3].EventID || held[0].Parked != 5 ||
		held[0].Head == nil || held[0].Head.State != catalog.StatePending {
		t.Fatalf("held keys = %+v (%v): want k3 with the poison as its head (ingested) and 5 parked", held, err)
	}
	if e, err := cat.Get(ctx, held[0].Head.ID); err != nil || e.Reason != string(evidence.ReasonDeliveryLimit) {
		t.Fatalf("head entry = %+v (%v), want reason delivery_limit", e, err)
	}

	// The fix is deployed: a consumer that processes everything.
	log := &transporttest.BodyLog{}
	c, err := lily.NewConsumer(tr, log, lily.ConsumerOptions{Queue: qc, Keys: redrive.NewKeys(cat), ReceiveWait: 20 * time.Millisecond, KeyPoll: 20 * time.Millisecond,
		Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	target := func(context.Context, string) (redrive.Publisher, error) { return raw, nil }
	if res, err := redrive.NewKeys(cat).Unpark(ctx, redrive.UnparkParams{Queue: qc.Name, Key: "k3", Target: target}); err != nil || res.Action != "redrive_head" {
		t.Fatalf("unpark = %+v, %v", res, err)
	}
	transporttest.WaitFor(t, "k3 unparked and processed", func() bool {
		ks, err := redrive.NewKeys(cat).HeldKeys(ctx, qc.Name)
		return err == nil && len(ks) == 0 && len(log.Bodies()) == 6
	})
	stop()
	if want := []string{"poison", "order-8", "order-13", "order-18", "order-23", "order-28"}; !slices.Equal(log.Bodies(), want) {
		t.Errorf("k3 processed in order %v, want %v", log.Bodies(), want)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil || len(rows) != 1 || rows[0] != (ledger.Row{Queue: qc.Name, Accepted: 30, Acked: 30}) {
		t.Errorf("ledger = %+v (%v), want 30 accepted, 30 acked", rows, err)
	}
}

// TestCrashTypePoisonCompetingConsumers is TestCrashTypePoison with three
// consumer processes on the queue at once (a third of the messages from a
// foreign producer, without a message_id), each restarted when it dies:
// a death returns the dead consumer's whole window with raised counts to
// the others, mid-stream, so each of them must take such redeliveries
// alone (its pushed first deliveries settled first). The consumers die
// exactly delivery_limit times in all, the broker dead-letters the poison
// alone at its delivery limit, and every other message is processed.
func TestCrashTypePoisonCompetingConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := crashQueueConfig(randomName("crash.fleet"), lily.OrderingReorder)
	tr := openDeclared(t, qc)
	// A third of the messages come from another service's producer: no
	// message_id, an AMQP decimal and a nested table. Their event IDs are
	// the synthetic ones, which a give-back copy must keep.
	msgs := make([]lily.Message, 90)
	var ours []lily.Message
	var foreign []amqp.Publishing
	const poison = 31
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("order-%d", i))
		if i == poison {
			msgs[i].Body = []byte("poison")
		}
		if i%3 != 0 {
			ours = append(ours, msgs[i])
			continue
		}
		h := amqp.Table{"amount": amqp.Decimal{Scale: 2, Value: int32(1999 + i)}, "meta": amqp.Table{"n": int32(i)}}
		msgs[i].EventID = rabbitmq.EventID(qc.Name, &amqp.Delivery{Body: msgs[i].Body, Headers: h})
		foreign = append(foreign, amqp.Publishing{Body: msgs[i].Body, Headers: h, DeliveryMode: amqp.Persistent})
	}
	if err := lily.Publish(ctx, tr, qc.Name, ours); err != nil {
		t.Fatal(err)
	}
	for i, j := 0, 0; i < len(msgs); i++ { // the event IDs lily.Publish chose
		if i%3 != 0 {
			msgs[i].EventID, j = ours[j].EventID, j+1
		}
	}
	rabbittest.Publish(ctx, t, brokerURL(), qc.Name, foreign...)
	logPath := filepath.Join(t.TempDir(), "acked.log")
	// 10 ms a message: the three consumers overlap for the whole run.
	restarts := transporttest.RunCrashFleetDrained(t, 3, crashLeft(tr, qc.Name), crashChildQueue+"="+qc.Name, crashChildLog+"="+logPath, crashChildCatalog+"=",
		crashChildPause+"=10ms")
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("the consumers died %d times in all, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	// The poison is dead-lettered alone, at the delivery limit: by the
	// broker, or — when it was given back as a copy carrying its count —
	// by Lily, on the delivery after the limit, without calling a handler.
	dls, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(qc.Name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID {
		for _, d := range dls {
			t.Logf("dead letter %s %q: headers %v", d.EventID, d.Body, d.Headers)
		}
		t.Fatalf("dead-letter queue holds %d messages, want exactly the poison", len(dls))
	}
	if r, ok := evidence.BrokerReason(dls[0].Headers); !ok || r != evidence.ReasonDeliveryLimit {
		rec, err := evidence.Decode(dls[0].Headers)
		if err != nil || rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != qc.Settings().DeliveryLimit+1 {
			t.Errorf("poison dead-lettered by the broker for %q (%v), by Lily for %q at count %d (%v); want delivery_limit, by Lily at count %d",
				r, ok, rec.Reason, rec.DeliveryCount, err, qc.Settings().DeliveryLimit+1)
		}
	}
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}
