package inboxoutbox_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// The crash tests re-execute this test binary as a consumer child
// (effecttest.Main) that kills itself with SIGKILL right after its handler
// committed the effect and before the runtime acked the delivery.
func TestMain(m *testing.M) { effecttest.Main(m, openCrashTransport) }

// openCrashTransport opens a crash child's Kafka transport; broker is the
// seed brokers.
func openCrashTransport(ctx context.Context, qc lily.QueueConfig, broker string) (effecttest.Broker, error) {
	if qc.Transport != lily.TransportKafka {
		return nil, fmt.Errorf("crash child: transport %q", qc.Transport)
	}
	k, err := kafka.Open(ctx, kafkaTestOptions(kafka.ParseBrokers(broker)))
	if err != nil {
		return nil, err
	}
	k.Register(qc.Spec())
	return k, nil
}

// kafkaTestOptions are the Kafka transport's options on kfake, with
// timings fit for tests; a static member takes its partitions back at
// once when it is restarted.
func kafkaTestOptions(brokers []string) kafka.Options {
	return kafka.Options{Brokers: brokers, Partitions: 3, StaticMembership: true,
		SessionTimeout: 3 * time.Second, RebalanceTimeout: 5 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RevokeTimeout: 2 * time.Second, ProduceTimeout: 10 * time.Second, MetadataMaxAge: time.Second,
		Logger: slog.New(slog.DiscardHandler)}
}

// Traffic published below Lily, as other services' producers publish it:
// raw franz-go records with no x-lily-event-id, binary header values.

// rawKafka produces recs with a plain franz-go client, acks=all.
func rawKafka(t *testing.T, c *kfake.Cluster, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatalf("raw franz-go client: %v", err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("raw produce: %v", err)
	}
}

// foreignRecord is a payment as a foreign Kafka producer sends it: no
// x-lily-event-id, binary headers — the amount as 4 bytes big-endian (as
// Spring Kafka writes an int), bytes that are not UTF-8.
func foreignRecord(topic, key, body string, amt uint32) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(body), Headers: []kgo.RecordHeader{
		{Key: "x-amount", Value: binary.BigEndian.AppendUint32(nil, amt)},
		{Key: "x-trace", Value: []byte{0xff, 0xfe, 0x00, 0x01}},
	}}
}

// newKfake starts an in-process Kafka cluster, closed when the test ends.
func newKfake(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// openKafka connects Lily's Kafka transport to c and declares qc's topics.
func openKafka(t *testing.T, c *kfake.Cluster, qc lily.QueueConfig) *kafka.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := kafka.Open(ctx, kafkaTestOptions(c.ListenAddrs()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return tr
}
