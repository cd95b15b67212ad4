package cli

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestDLQKafkaRedriveToOriginPartition ingests a Spring Kafka dead letter
// (DeadLetterPublishingRecoverer's default topic <topic>.DLT, partition and
// offset as 4- and 8-byte big-endian integers) and a Kafka Connect one
// (string headers), each from a partition its key would not pick, from
// one-partition dead-letter topics, and redrives them: each lands in its
// original topic and partition with body, key and headers as they were.
func TestDLQKafkaRedriveToOriginPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, brokers := newKafka(t)
	const parts = 6
	for _, topic := range []string{"orders", "crm.contacts"} {
		if err := cluster.CreateTopic(topic, parts, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"orders.DLT", "dlq-jdbc-sink"} {
		if err := cluster.CreateTopic(topic, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The partition murmur2 (the Java client's and Lily's) picks for the
	// key; the original is another one.
	keyPart := int32(kgo.StickyKeyPartitioner(nil).ForTopic("orders").Partition(&kgo.Record{Key: []byte("acct-9")}, parts))
	springPart := (keyPart + 1) % parts
	be32 := binary.BigEndian.AppendUint32(nil, uint32(springPart))
	be64 := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	spring := &kgo.Record{Topic: "orders.DLT", Key: []byte("acct-9"), Value: []byte(`{"account":9}`), Headers: []kgo.RecordHeader{
		{Key: "kafka_dlt-original-topic", Value: []byte("orders")},
		{Key: "kafka_dlt-original-partition", Value: be32},
		{Key: "kafka_dlt-original-offset", Value: be64(42)},
		{Key: "kafka_dlt-original-timestamp", Value: be64(1764400000000)},
		{Key: "kafka_dlt-original-timestamp-type", Value: []byte("CreateTime")},
		{Key: "kafka_dlt-original-consumer-group", Value: []byte("orders-service")},
		{Key: "kafka_dlt-exception-fqcn", Value: []byte("org.springframework.kafka.listener.ListenerExecutionFailedException")},
		{Key: "kafka_dlt-exception-message", Value: []byte("no such account")},
		{Key: "kafka_dlt-exception-stacktrace", Value: []byte("java.lang.IllegalStateException: no such account\n\tat Orders.charge(Orders.java:42)")},
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}}
	connect := &kgo.Record{Topic: "dlq-jdbc-sink", Value: []byte("not avro"), Headers: []kgo.RecordHeader{
		{Key: "__connect.errors.topic", Value: []byte("crm.contacts")},
		{Key: "__connect.errors.partition", Value: []byte("3")},
		{Key: "__connect.errors.offset", Value: []byte("7")},
		{Key: "__connect.errors.connector.name", Value: []byte("jdbc-sink")},
		{Key: "__connect.errors.task.id", Value: []byte("0")},
		{Key: "__connect.errors.stage", Value: []byte("VALUE_CONVERTER")},
		{Key: "__connect.errors.class.name", Value: []byte("io.confluent.connect.avro.AvroConverter")},
		{Key: "__connect.errors.exception.class.name", Value: []byte("org.apache.kafka.connect.errors.DataException")},
		{Key: "__connect.errors.exception.message", Value: []byte("Converting byte[] to Kafka Connect data failed")},
	}}
	k := openTestKafka(t, brokers, func(o *kafka.Options) {
		o.DeadLetterTopics = map[string]string{"orders": "orders.DLT", "crm.contacts": "dlq-jdbc-sink"}
	})
	if err := k.Client().ProduceSync(ctx, spring, connect).FirstErr(); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "catalog.db")
	cfg := writeConfig(t, fmt.Sprintf(`db = %q
kafka_brokers = [%q]
[kafka_dead_letter_topics]
"orders" = "orders.DLT"
"crm.contacts" = "dlq-jdbc-sink"
[[queue]]
name = "orders"
transport = "kafka"
[[queue]]
name = "crm.contacts"
transport = "kafka"
`, db, strings.Split(brokers, ",")[0]))
	code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
	var res ingestJSON
	mustJSON(t, out, &res)
	if code != 0 || res.Total != 2 {
		t.Fatalf("ingest: exit %d %s %+v", code, errOut, res)
	}
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("redrive: exit %d\n%s\n%s", code, out, errOut)
	}
	byState, err := openCatalog(t, db).CountBy(ctx, "state", catalog.Filter{})
	if err != nil || byState[string(catalog.StateRedriven)] != 2 || len(byState) != 1 {
		t.Fatalf("catalog states %v (%v), want both entries redriven", byState, err)
	}
	// Read both topics from the start: exactly the two redriven records.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumeTopics("orders", "crm.contacts"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(got) < 2 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	if len(got) != 2 {
		t.Fatalf("read %d records from the origin topics, want the 2 redriven", len(got))
	}
	header := func(r *kgo.Record, k string) []byte {
		for _, h := range r.Headers {
			if h.Key == k {
				return h.Value
			}
		}
		return nil
	}
	for _, r := range got {
		switch r.Topic {
		case "orders":
			if r.Partition != springPart || string(r.Key) != "acct-9" || string(r.Value) != `{"account":9}` ||
				string(header(r, "kafka_dlt-original-partition")) != string(be32) || string(header(r, "traceparent")) == "" {
				t.Errorf("Spring dead letter redriven to orders/%d (key partition %d, original %d): key %q value %q", r.Partition, keyPart, springPart, r.Key, r.Value)
			}
		case "crm.contacts":
			if r.Partition != 3 || string(r.Value) != "not avro" || string(header(r, "__connect.errors.partition")) != "3" {
				t.Errorf("Connect dead letter redriven to crm.contacts/%d, want 3: value %q", r.Partition, r.Value)
			}
		default:
			t.Errorf("a record in %s", r.Topic)
		}
	}
	for _, q := range []string{"orders", "crm.contacts"} {
		if n, err := k.DeadLetterDepth(ctx, q); err != nil || n != 0 {
			t.Errorf("%s: %d dead letters left undrained (%v)", q, n, err)
		}
	}
}
