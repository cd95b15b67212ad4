package cli

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestDLQKafkaRedriveToOriginPartition ingests a Spring Kafka dead letter
// (DeadLetterPublishingRecoverer's default topic <topic>.DLT, partition and
// offset as 4- and 8-byte big-endian integers) whose failing consumer group
// is Lily's group of the origin topic, and a Kafka Connect one (string
// headers) whose failing group is the sink connector's, each from a
// partition its key would not pick, from one-partition dead-letter topics,
// and redrives them. The Spring one lands in the origin topic's return
// topic (read by Lily's group alone), in its original partition, with
// body, key and headers as they were; the Connect one is refused — no
// topic reaches the connector's group alone, and the origin topic would
// reach every group — and stays pending. Nothing goes to either origin
// topic, which every consumer group reads.
func TestDLQKafkaRedriveToOriginPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, brokers := newKafka(t)
	const parts = 6
	for _, topic := range []string{"orders", kafka.ReturnTopic("orders"), "crm.contacts", kafka.ReturnTopic("crm.contacts")} {
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
		{Key: "kafka_dlt-original-consumer-group", Value: []byte(kafka.DefaultGroup("orders"))},
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
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--queue", "orders", "--json")
	if code != 0 {
		t.Fatalf("redrive of orders: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--queue", "crm.contacts")
	if code == 0 || !strings.Contains(errOut, `"connect-jdbc-sink"`) || !strings.Contains(errOut, "--to") {
		t.Fatalf("redrive of crm.contacts: exit %d\n%s\n%s\nwant it refused naming the connector's group and the way out", code, out, errOut)
	}
	byState, err := openCatalog(t, db).CountBy(ctx, "state", catalog.Filter{})
	if err != nil || byState[string(catalog.StateRedriven)] != 1 || byState[string(catalog.StatePending)] != 1 || len(byState) != 2 {
		t.Fatalf("catalog states %v (%v), want one entry redriven and one pending", byState, err)
	}
	// Nothing in either origin topic; the Spring dead letter alone in the
	// return topic of orders, in its original partition.
	for _, topic := range []string{"orders", "crm.contacts", kafka.ReturnTopic("crm.contacts")} {
		if recs, err := k.Peek(ctx, &kafka.PeekParams{Topic: topic}); err != nil || len(recs) != 0 {
			t.Errorf("%s holds %d records (%v), want none", topic, len(recs), err)
		}
	}
	recs, err := k.Peek(ctx, &kafka.PeekParams{Topic: kafka.ReturnTopic("orders")})
	if err != nil || len(recs) != 1 {
		t.Fatalf("%s holds %d records (%v), want the redriven one", kafka.ReturnTopic("orders"), len(recs), err)
	}
	r := recs[0]
	if r.Partition != springPart || r.Key != "acct-9" || string(r.Body) != `{"account":9}` ||
		fmt.Sprintf("%s", r.Headers["kafka_dlt-original-partition"]) != string(be32) || r.Headers["traceparent"] == nil {
		t.Errorf("Spring dead letter redriven to %d (key partition %d, original %d): key %q value %q headers %v", r.Partition, keyPart, springPart, r.Key, r.Body, r.Headers)
	}
	for _, q := range []string{"orders", "crm.contacts"} {
		if n, err := k.DeadLetterDepth(ctx, q); err != nil || n != 0 {
			t.Errorf("%s: %d dead letters left undrained (%v)", q, n, err)
		}
	}
}
