package inbox_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// Traffic published below Lily, as other services' producers publish it:
// a raw amqp091 client with no message_id, raw franz-go records with no
// x-lily-event-id, header values of types Lily's publisher never writes.

// foreignPublishing is a payment as a foreign AMQP producer sends it: no
// message_id, an AMQP decimal amount (x-amount, unscaled value amt), a
// nested table, an unsigned byte, an application ID and a content type.
func foreignPublishing(body string, amt int32) amqp.Publishing {
	return amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent, ContentType: "application/json", AppId: "billing",
		Headers: amqp.Table{
			"x-amount": amqp.Decimal{Scale: 2, Value: amt},
			"x-meta":   amqp.Table{"source": "billing", "region": "eu", "deeper": amqp.Table{"flag": true, "n": int16(3)}},
			"x-tiny":   uint8(200),
		}}
}

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

// openRabbit connects Lily's RabbitMQ transport to url and declares qc's
// topology, removed when the test ends.
func openRabbit(t *testing.T, url string, qc lily.QueueConfig) *rabbitmq.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.DeleteQueues(ctx, qc.Spec()); err != nil {
			t.Logf("removing %s: %v", qc.Name, err)
		}
		tr.Close()
	})
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return tr
}

func randomQueue(prefix string) string { return fmt.Sprintf("%s.%08x", prefix, rand.Uint32()) }

// TestKill9ForeignProducers is TestKill9BetweenCommitAndAck for traffic
// Lily did not publish: payments sent by a raw amqp091 client with no
// message_id (an AMQP decimal amount, a nested table) to a real RabbitMQ,
// and by a raw franz-go producer with no x-lily-event-id (binary headers)
// to kfake. The consumer, counting into a catalog's ledger, commits each
// effect through the inbox keyed by the transport's synthetic event ID
// (RabbitMQ: syn-…, Kafka: topic/partition/offset) and is killed with
// SIGKILL after the commit of every third payment, before the ack, and
// restarted. Every payment's effect is applied exactly once (rows and
// amounts in the application database), every redelivery after a kill
// carries the same synthetic ID as the delivery that applied it and is
// found applied, and the ledger balances: accepted = acked, nothing lost.
func TestKill9ForeignProducers(t *testing.T) {
	const n = 90
	bodies := make([][]byte, n)
	var wantAmount int64
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"payment":%d}`, i)
		wantAmount += int64(100 + i)
	}
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		url := rabbittest.URL(t)
		qc := crashQueueConfig(lily.TransportRabbitMQ, randomQueue("inbox.crash.foreign"))
		tr := openRabbit(t, url, qc)
		pubs := make([]amqp.Publishing, n)
		for i, b := range bodies {
			pubs[i] = foreignPublishing(string(b), int32(100+i))
		}
		rabbittest.Publish(context.Background(), t, url, qc.Name, pubs...)
		runForeignKills(t, qc, tr, url, bodies, wantAmount, func(id string) bool { return strings.HasPrefix(id, rabbitmq.SyntheticIDPrefix) })
	})
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		c := newKfake(t)
		qc := crashQueueConfig(lily.TransportKafka, randomQueue("inbox.crash.foreign"))
		tr := openKafka(t, c, qc)
		recs := make([]*kgo.Record, n)
		for i, b := range bodies {
			recs[i] = foreignRecord(qc.Name, fmt.Sprintf("acct-%d", i%5), string(b), uint32(100+i))
		}
		rawKafka(t, c, recs)
		runForeignKills(t, qc, tr, strings.Join(c.ListenAddrs(), ","), bodies, wantAmount, func(id string) bool { return strings.HasPrefix(id, qc.Name+"/") })
	})
}

// runForeignKills runs the kill loop on qc's broker (tr, reached at
// broker) with a SQLite application database and a SQLite catalog, and
// checks exactly-once effects, stable IDs and the ledger.
func runForeignKills(t *testing.T, qc lily.QueueConfig, tr transport.InFlightCounter, broker string, bodies [][]byte, wantAmount int64, idOK func(string) bool) {
	t.Helper()
	dir := t.TempDir()
	app, dsn := crashApp(t, "sqlite", dir)
	logPath, catPath := filepath.Join(dir, "deliveries.log"), filepath.Join(dir, "catalog.db")
	start := time.Now()
	// A static Kafka member and a RabbitMQ consumer keep one instance
	// name; the broker gives a dead one's deliveries back itself.
	kills := killLoop(t, 4*len(bodies), []string{crashTransport + "=" + qc.Transport, crashQueue + "=" + qc.Name, crashBroker + "=" + broker,
		crashCatalog + "=" + catPath, crashAppKind + "=sqlite", crashAppDSN + "=" + dsn, crashLog + "=" + logPath},
		func(int) string { return "inbox-crash" }, nil)
	checkExactlyOnce(t, app, logPath, kills, bodies, wantAmount, idOK)
	cat, err := catalog.Open(context.Background(), catPath)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	checkLedger(t, cat, tr, qc.Name, int64(len(bodies)))
	t.Logf("%s: %d foreign messages, %d kills in %v", qc.Transport, len(bodies), kills, time.Since(start).Round(time.Millisecond))
}
