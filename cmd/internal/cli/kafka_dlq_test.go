package cli

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// openTestKafka connects a transport to the seed brokers, closed at the end of the
// test.
func openTestKafka(t *testing.T, seeds string, mod ...func(*kafka.Options)) *kafka.Transport {
	t.Helper()
	o := demo.KafkaOptions(kafka.ParseBrokers(seeds))
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, f := range mod {
		f(&o)
	}
	k, err := brokers.OpenKafka(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// consumeKafka runs a consumer of qc on tr until every record is settled
// (nothing in flight) and want more events were acked; it returns the
// event IDs acked.
func consumeKafka(t *testing.T, tr transport.Transport, counter transport.InFlightCounter, qc lily.QueueConfig, h lily.HandlerFunc, wantAcked int) map[string]bool {
	t.Helper()
	var mu sync.Mutex
	acked := map[string]bool{}
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventAcked {
			mu.Lock()
			acked[e.EventID] = true
			mu.Unlock()
		}
	})
	c, err := lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 16, Instance: "test-consumer",
		ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waittest.For(t, "the consumer to settle everything", func() bool {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		left, err := counter.InFlight(context.Background(), qc.Name)
		return err == nil && left == 0 && n >= wantAcked
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("consumer: %v", err)
	}
	return acked
}

// TestDLQKafkaIngestRedrive takes a Lily dead letter through the CLI on
// Kafka: peek (not ingested yet), ingest (drain group committed after the
// catalog commit), show, a redrive whose produce the cluster refuses (the
// entry stays pending), a redrive that is acknowledged (the queue's return
// topic, which its consumer group alone reads — not the source topic —
// same key and partition, event ID and headers kept, x-retry-count reset,
// redrive count 1), the fixed consumer processing it, and the ledger
// balanced at each step.
func TestDLQKafkaIngestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, brokers := newKafka(t)
	db := filepath.Join(t.TempDir(), "catalog.db")
	queue := "payments.captured"
	cfg := kafkaConfig(t, db, brokers, queue, "")
	c, err := config.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	qc, _ := c.Queue(queue)
	qc.RetryAttempts, qc.RetryJitterRatio = 1, 0 // one retry, then retries_exhausted

	k := openTestKafka(t, brokers)
	cat := openCatalog(t, db)
	acc := ledger.Account(k, ledger.New(cat))
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := []lily.Message{
		{Key: "cust-1", Body: []byte("ok-1")}, {Key: "cust-2", Body: []byte("ok-2")}, {Key: "cust-3", Body: []byte("ok-3")},
		{EventID: "evt-bad", Key: "cust-7", Type: "payment.captured", Body: []byte("bad"),
			Headers: lily.Headers{"source-system": "till-42", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	}
	if err := lily.Publish(ctx, acc, queue, msgs); err != nil {
		t.Fatal(err)
	}
	reconciled := func(when string, acked, deadLettered, inFlight int64) {
		t.Helper()
		code, out, errOut := run(t, "reconcile", "--config", cfg, "--json")
		var rec reconcileJSON
		mustJSON(t, out, &rec)
		if code != 0 || !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 4 || rec.Queues[0].Acked != acked ||
			rec.Queues[0].DeadLettered != deadLettered || rec.Queues[0].InFlight != inFlight {
			t.Errorf("%s: reconcile exit %d %s\n%s, want accepted 4, acked %d, dead-lettered %d, in flight %d", when, code, errOut, out, acked, deadLettered, inFlight)
		}
	}
	errInventory := errors.New("inventory service: 503")
	consumeKafka(t, acc, k, qc, func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "bad" {
			return errInventory
		}
		return nil
	}, 3)
	reconciled("dead letter in the topic", 3, 1, 0)

	// Peek shows it without consuming it; ingest drains it once.
	code, out, errOut := run(t, "dlq", "peek", "--config", cfg, "--queue", queue, "--json")
	var peek struct {
		Entries []entryJSON `json:"entries"`
	}
	mustJSON(t, out, &peek)
	if code != 0 || len(peek.Entries) != 1 || peek.Entries[0].Location != "broker_dlq" || peek.Entries[0].EventID != "evt-bad" ||
		peek.Entries[0].Reason != "retries_exhausted" {
		t.Fatalf("peek: %d %s %+v", code, errOut, peek.Entries)
	}
	for i, want := range []int{1, 0} {
		code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
		var res ingestJSON
		mustJSON(t, out, &res)
		if code != 0 || res.Total != want || res.Queues[queue] != want {
			t.Errorf("ingest %d: exit %d %s %+v, want %d", i+1, code, errOut, res, want)
		}
	}
	if n, err := k.DeadLetterDepth(ctx, queue); err != nil || n != 0 {
		t.Errorf("dead-letter topic depth after ingest %d (%v), want 0 (drain group committed)", n, err)
	}
	reconciled("dead letter ingested", 3, 1, 0)
	code, out, errOut = run(t, "dlq", "show", "1", "--config", cfg, "--json")
	var e entryJSON
	mustJSON(t, out, &e)
	origPart := e.Evidence.Lily.SourcePartition
	if code != 0 || e.EventID != "evt-bad" || e.Key != "cust-7" || e.Reason != "retries_exhausted" || e.RetryCount != 1 ||
		origPart == nil || e.Evidence.Lily.Source == "" || !strings.Contains(e.ErrorMessage, "inventory service: 503") {
		t.Fatalf("show: exit %d %s %+v", code, errOut, e)
	}

	// The cluster refuses every produce to the return topic: the redrive
	// fails and the entry stays pending (it changes only after the ack).
	fault := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: kafka.ReturnTopic(queue), Err: kerr.InvalidRecord, Count: -1})
	code, _, errOut = run(t, "dlq", "redrive", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, "redrive stopped after 0 redriven") {
		t.Errorf("redrive refused by the cluster: exit %d %s", code, errOut)
	}
	if st := entryStates(t, db); st["pending"] != 1 || st["redriven"] != 0 {
		t.Errorf("states after a refused produce %v, want the entry pending", st)
	}
	fault.Remove()

	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--json")
	var rr redriveJSON
	mustJSON(t, out, &rr)
	if code != 0 || rr.Redriven != 1 {
		t.Fatalf("redrive: exit %d %s %+v", code, errOut, rr)
	}
	if st := entryStates(t, db); st["redriven"] != 1 || st["pending"] != 0 {
		t.Errorf("states after the redrive %v", st)
	}
	if got := auditOutcomes(t, db); got["redrive/failed"] != 1 || got["redrive/redriven"] != 1 {
		t.Errorf("audit %v, want one failed and one redriven", got)
	}
	// The original alone in the source topic, which every consumer group
	// reads; the copy in the return topic, which Lily's group alone reads:
	// same key, so the same partition number.
	var copies []*transport.Delivery
	for _, topic := range []string{queue, kafka.ReturnTopic(queue)} {
		recs, err := k.Peek(ctx, &kafka.PeekParams{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		var here []*transport.Delivery
		for _, r := range recs {
			if r.EventID == "evt-bad" {
				here = append(here, r)
			}
		}
		if len(here) != 1 {
			t.Fatalf("%d records of evt-bad in %s, want 1", len(here), topic)
		}
		copies = append(copies, here[0])
	}
	orig, red := copies[0], copies[1]
	if red.Partition != orig.Partition || red.Partition != *origPart || red.Key != "cust-7" || red.Type != "payment.captured" ||
		string(red.Body) != "bad" {
		t.Errorf("redriven copy %+v in partition %d, original in %d", red.Message, red.Partition, orig.Partition)
	}
	if evidence.RedriveCount(red.Headers) != 1 || red.Headers["source-system"] != "till-42" ||
		red.Headers["traceparent"] != msgs[3].Headers["traceparent"] {
		t.Errorf("redriven headers %v: want redrive count 1 and the original headers", red.Headers)
	}
	if n, ok := red.Headers[evidence.HeaderRetryCount]; ok && n != int32(0) {
		t.Errorf("x-retry-count %v (%T) on the redriven copy, want it reset", n, n)
	}
	if _, ok := red.Headers[evidence.HeaderReason]; ok {
		t.Errorf("the redriven copy still carries dead-letter evidence: %v", red.Headers)
	}
	reconciled("redriven, not consumed yet", 3, 0, 1)

	// The fixed consumer processes it.
	acked := consumeKafka(t, acc, k, qc, func(ctx context.Context, d *lily.Delivery) error {
		if d.EventID == "evt-bad" && d.RedriveCount != 1 {
			return lily.Permanent(fmt.Errorf("redrive count %d, want 1", d.RedriveCount))
		}
		return nil
	}, 1)
	if !acked["evt-bad"] {
		t.Errorf("the redriven message was not acked: %v", acked)
	}
	reconciled("redriven message processed", 4, 0, 0)
}

// TestDLQKafkaForeignDeadLetterTopics ingests dead-letter topics written
// by others — Spring Kafka, Kafka Connect, Kafka Streams, produced here
// with their headers by a plain franz-go producer — through the CLI, with
// kafka_dead_letter_topics naming them: every record becomes one catalog
// entry (none lost between the topic and the catalog, a second ingest adds
// nothing) that keeps the foreign evidence, and 'lily dlq show' decodes it.
func TestDLQKafkaForeignDeadLetterTopics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, brokers := newKafka(t)
	db := filepath.Join(t.TempDir(), "catalog.db")
	// Spring writes partition and offset as big-endian binary integers.
	be32 := func(n int32) string { return string(binary.BigEndian.AppendUint32(nil, uint32(n))) }
	be64 := func(n int64) string { return string(binary.BigEndian.AppendUint64(nil, uint64(n))) }
	hdr := func(pairs ...string) []kgo.RecordHeader {
		out := make([]kgo.RecordHeader, 0, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			out = append(out, kgo.RecordHeader{Key: pairs[i], Value: []byte(pairs[i+1])})
		}
		return out
	}
	type want struct {
		queue, system, errType, source, message string
		part                                    int32
		off                                     int64
	}
	cases := []struct {
		want
		dlt string
		rec *kgo.Record
	}{
		{want{"billing", evidence.SystemSpringKafka, "java.lang.IllegalStateException", "billing", "no such account", 2, 42}, "billing-dlt",
			&kgo.Record{Key: []byte("acct-9"), Value: []byte(`{"account":9}`), Headers: hdr(
				"kafka_dlt-original-topic", "billing", "kafka_dlt-original-partition", be32(2), "kafka_dlt-original-offset", be64(42),
				"kafka_dlt-original-timestamp", be64(1764400000000), "kafka_dlt-exception-fqcn", "java.lang.IllegalStateException",
				"kafka_dlt-exception-message", "no such account", "kafka_dlt-exception-stacktrace", "java.lang.IllegalStateException: no such account\n\tat Billing.charge(Billing.java:42)",
				"kafka_dlt-original-consumer-group", "billing-service")}},
		{want{"crm.contacts", evidence.SystemKafkaConnect, "org.apache.kafka.connect.errors.DataException", "crm.contacts", "Converting byte[] to Kafka Connect data failed", 1, 7},
			"dlq-jdbc-sink", &kgo.Record{Value: []byte("not avro"), Headers: hdr(
				"__connect.errors.topic", "crm.contacts", "__connect.errors.partition", "1", "__connect.errors.offset", "7",
				"__connect.errors.stage", "VALUE_CONVERTER", "__connect.errors.class.name", "io.confluent.connect.avro.AvroConverter",
				"__connect.errors.exception.class.name", "org.apache.kafka.connect.errors.DataException",
				"__connect.errors.exception.message", "Converting byte[] to Kafka Connect data failed",
				"__connect.errors.connector.name", "jdbc-sink", "__connect.errors.task.id", "0")}},
		{want{"clicks", evidence.SystemKafkaStreams, "org.apache.kafka.common.errors.SerializationException", "clicks", "Unknown magic byte!", 0, 99},
			"clicks-app-dlq", &kgo.Record{Key: []byte("session-3"), Value: []byte{0x42, 0x00}, Headers: hdr(
				"__streams.errors.topic", "clicks", "__streams.errors.partition", "0", "__streams.errors.offset", "99",
				"__streams.errors.exception", "org.apache.kafka.common.errors.SerializationException",
				"__streams.errors.message", "Unknown magic byte!", "__streams.errors.stacktrace", "SerializationException: Unknown magic byte!")}},
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "db = %q\nkafka_brokers = [%q]\n[kafka_dead_letter_topics]\n", db, strings.Split(brokers, ",")[0])
	for _, c := range cases {
		fmt.Fprintf(&conf, "%q = %q\n", c.queue, c.dlt)
	}
	for _, c := range cases {
		fmt.Fprintf(&conf, "[[queue]]\nname = %q\ntransport = \"kafka\"\n", c.queue)
	}
	cfg := writeConfig(t, conf.String())
	k := openTestKafka(t, brokers, func(o *kafka.Options) {
		o.DeadLetterTopics = map[string]string{}
		for _, c := range cases {
			o.DeadLetterTopics[c.queue] = c.dlt
		}
	})
	var recs []*kgo.Record
	for _, c := range cases {
		if err := cluster.CreateTopic(c.dlt, 2, nil); err != nil {
			t.Fatal(err)
		}
		// Each foreign system wrote two dead letters.
		for range 2 {
			r := *c.rec
			r.Topic = c.dlt
			recs = append(recs, &r)
		}
	}
	if err := k.Client().ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
	var res ingestJSON
	mustJSON(t, out, &res)
	if code != 0 || res.Total != len(recs) {
		t.Fatalf("ingest: exit %d %s %+v, want %d", code, errOut, res, len(recs))
	}
	if code, out, _ := run(t, "dlq", "ingest", "--config", cfg, "--json"); code != 0 || !strings.Contains(out, `"total": 0`) {
		t.Errorf("second ingest: %d %s", code, out)
	}
	for _, c := range cases {
		t.Run(c.system, func(t *testing.T) {
			t.Parallel()
			if n, err := k.DeadLetterDepth(ctx, c.queue); err != nil || n != 0 {
				t.Errorf("%s: depth %d (%v) after ingest, want 0", c.dlt, n, err)
			}
			var ids []int64
			if err := openCatalog(t, db).Each(ctx, catalog.Filter{Queue: c.queue}, func(e *catalog.Entry) error {
				ids = append(ids, e.ID)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(ids) != 2 {
				t.Fatalf("%d entries of %s, want 2 (one per record of %s)", len(ids), c.queue, c.dlt)
			}
			code, out, errOut := run(t, "dlq", "show", fmt.Sprint(ids[0]), "--config", cfg, "--json")
			var e entryJSON
			mustJSON(t, out, &e)
			if code != 0 || len(e.Evidence.Foreign) != 1 {
				t.Fatalf("show: exit %d %s %+v", code, errOut, e)
			}
			f := e.Evidence.Foreign[0]
			if f.System != c.system || f.ExceptionType != c.errType || f.Source != c.source || f.Message != c.message ||
				f.Partition == nil || *f.Partition != c.part || f.Offset == nil || *f.Offset != c.off {
				t.Errorf("foreign evidence %+v, want %+v", f, c.want)
			}
			if e.ErrorType != c.errType || !strings.Contains(e.ErrorMessage, c.system) || !strings.Contains(e.ErrorMessage, c.message) {
				t.Errorf("entry error %q / %q, want the foreign exception", e.ErrorType, e.ErrorMessage)
			}
			if string(c.rec.Key) != e.Key || !strings.HasPrefix(e.EventID, c.dlt+"/") {
				t.Errorf("entry key %q event ID %q", e.Key, e.EventID)
			}
			code, out, _ = run(t, "dlq", "show", fmt.Sprint(ids[0]), "--config", cfg)
			if code != 0 || !strings.Contains(out, "foreign evidence") || !strings.Contains(out, c.system) || !strings.Contains(out, c.errType) {
				t.Errorf("human show lacks the foreign evidence:\n%s", out)
			}
		})
	}
}
