package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"

	"github.com/lily-mq/lily/internal/testparallel"
)

// The crash test re-executes this test binary as a consumer process that
// calls os.Exit on the poison record.
const (
	crashChildBrokers = "LILY_KAFKA_CRASH_BROKERS"
	crashChildQueue   = "LILY_KAFKA_CRASH_QUEUE"
	crashChildLog     = "LILY_KAFKA_CRASH_LOG"
	crashChildShare   = "LILY_KAFKA_CRASH_SHARE_GROUP"
)

func TestMain(m *testing.M) {
	if q := os.Getenv(crashChildQueue); q != "" {
		os.Exit(crashChild(os.Getenv(crashChildBrokers), q, os.Getenv(crashChildLog)))
	}
	// The tests wait on the broker far more than they compute (docs/testing.md).
	testparallel.Default(4)
	os.Exit(m.Run())
}

func crashQueueConfig(name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(3),
		KafkaShareGroup: os.Getenv(crashChildShare)}.WithDefaults()
}

// crashChild consumes until nothing is in flight; it appends the event ID
// of every record its handler processed to logPath (in the handler: an
// ack event can be lost with the process between the commit and the hook)
// and dies (os.Exit) on the body "poison". It is a
// static group member, so a restarted process takes the partitions back at
// once, as a restarted pod would.
func crashChild(brokers, queue, logPath string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := testOptions(kafka.ParseBrokers(brokers))
	o.StaticMembership = true
	shareOptions(&o)
	tr, err := kafka.Open(ctx, o)
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
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(transporttest.CrashExitCode) // the process dies mid-handler: no catch block sees it
		}
		logf.WriteString(d.EventID + "\n")
		return logf.Sync()
	}), lily.ConsumerOptions{Queue: qc, Instance: crashInstance(), Concurrency: 2, Prefetch: 10,
		ReceiveWait: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		return 3
	}
	go transporttest.CancelWhenIdle(ctx, tr, queue, 50*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		return 3
	}
	tr.Close()
	return 0
}

// crashInstance names a crash child's consumer: one name for every run of
// a member, so that a restarted run replaces its dead predecessor in the
// consumer group (static membership) at once, and a name per member of a
// fleet, so that members do not fence each other. (kfake never expires a
// classic-group member that died while waiting in JoinGroup — its join
// answer fails to send and no session timer starts — so a dynamic member
// killed mid-rebalance would keep its partitions forever; Kafka expires it
// after the session timeout.)
func crashInstance() string {
	if m := os.Getenv(transporttest.CrashMemberEnv); m != "" {
		return "crash-consumer-" + m
	}
	return "crash-consumer"
}

// TestCrashTypePoison runs a consumer subprocess that calls os.Exit on one
// record, restarts it each time it dies, and checks that the record lands
// in the dead-letter topic with reason delivery_limit after delivery_limit
// restarts — counted by the persistent attempt counter, since Kafka keeps
// no delivery count — while the records behind it in its partition and
// those of the other partitions are processed.
func TestCrashTypePoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	tr := open(t, c)
	qc := crashQueueConfig(fmt.Sprintf("crash.poison.%08x", rand.Uint32()))
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 30)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i%6), Body: []byte(fmt.Sprintf("order-%d", i))}
	}
	const poison = 13 // the third record of key k1, with records of k1 behind it
	msgs[poison].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashChildren(t, crashChildBrokers+"="+strings.Join(c.ListenAddrs(), ","),
		crashChildQueue+"="+qc.Name, crashChildLog+"="+logPath)
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	dls, err := tr.DeadLetters(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID || string(dls[0].Body) != "poison" {
		t.Fatalf("dead-letter topic holds %d records, want exactly the poison", len(dls))
	}
	dl := dls[0]
	rec, err := evidence.Decode(dl.Headers)
	if err != nil {
		t.Errorf("evidence: %v", err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != qc.Settings().DeliveryLimit+1 {
		t.Errorf("reason %q delivery count %d, want delivery_limit and %d", rec.Reason, rec.DeliveryCount, qc.Settings().DeliveryLimit+1)
	}
	if dl.Key != "k1" || !rec.HasPartition || !rec.HasOffset || rec.SourcePartition != dl.Partition {
		t.Errorf("dead letter key %q source %d/%d (has %v/%v) in DLT partition %d: want key k1 and the same partition",
			dl.Key, rec.SourcePartition, rec.SourceOffset, rec.HasPartition, rec.HasOffset, dl.Partition)
	}
	main, err := tr.Peek(ctx, &kafka.PeekParams{Topic: qc.Name})
	if err != nil {
		t.Fatal(err)
	}
	behind := 0
	for _, d := range main {
		if d.EventID == msgs[poison].EventID && (d.Partition != rec.SourcePartition || d.Offset != rec.SourceOffset) {
			t.Errorf("evidence source %d/%d, want the poison's %d/%d", rec.SourcePartition, rec.SourceOffset, d.Partition, d.Offset)
		}
		if d.Partition == rec.SourcePartition && d.Offset > rec.SourceOffset {
			behind++
		}
	}
	if behind == 0 {
		t.Error("no record behind the poison in its partition: the test proves less than it should")
	}
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	t.Logf("poison at %d/%d with %d records behind it; %d restarts", rec.SourcePartition, rec.SourceOffset, behind, restarts)
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}
