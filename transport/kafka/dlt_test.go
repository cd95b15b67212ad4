package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

func openCatalog(t *testing.T) *catalog.Store {
	t.Helper()
	s, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func entries(t *testing.T, s *catalog.Store, queue string) []*catalog.Entry {
	t.Helper()
	var out []*catalog.Entry
	if err := s.Each(context.Background(), catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIngestAndRedrive dead-letters records, drains the dead-letter topic
// into the catalog (offsets of the drain group committed after the catalog
// commit, a second ingest adding nothing), then redrives them through the
// catalog to the queue's return topic (read by its consumer group alone),
// where they come back with the same key, in the same partition number,
// with the redrive count raised; the source topic keeps only the
// originals.
func TestIngestAndRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	tr := open(t, c)
	qc := lily.QueueConfig{Name: fmt.Sprintf("dlt.redrive.%08x", rand.Uint32()), Transport: lily.TransportKafka}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 6)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("cust-%d", i), Type: "order.created", Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var fixed sync.Map
	redriven := make(chan *lily.Delivery, len(msgs))
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if _, ok := fixed.Load(d.EventID); ok {
			redriven <- d
			return nil
		}
		return lily.Permanent(errors.New("schema v2 not supported"))
	})
	stop := runConsumer(t, tr, qc, handler)
	transporttest.WaitFor(t, "every message dead-lettered", func() bool {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && n == int64(len(msgs))
	})
	stop()
	dls, err := tr.DeadLetters(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	sourcePart := map[string]int32{}
	for _, d := range dls {
		rec, err := evidence.Decode(d.Headers)
		if err != nil {
			t.Errorf("evidence of %s: %v", d.EventID, err)
		}
		if !rec.HasPartition || rec.SourcePartition != d.Partition {
			t.Errorf("%s in DLT partition %d, source partition %d (%v): want the same partition number", d.EventID, d.Partition, rec.SourcePartition, rec.HasPartition)
		}
		sourcePart[d.EventID] = rec.SourcePartition
	}

	store := openCatalog(t)
	n, err := store.Ingest(ctx, tr, qc.Name)
	if err != nil || n != len(msgs) {
		t.Fatalf("ingest: %d (%v), want %d", n, err, len(msgs))
	}
	if depth, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || depth != 0 {
		t.Errorf("dead-letter depth after ingest %d (%v), want 0", depth, err)
	}
	if n, err := store.Ingest(ctx, tr, qc.Name); err != nil || n != 0 {
		t.Errorf("second ingest drained %d (%v), want 0", n, err)
	}
	es := entries(t, store, qc.Name)
	if len(es) != len(msgs) {
		t.Fatalf("%d catalog entries, want %d", len(es), len(msgs))
	}
	for _, e := range es {
		if e.Reason != string(evidence.ReasonPermanent) || e.ErrorMessage == "" || e.Type != "order.created" {
			t.Errorf("entry %s: reason %q error %q type %q", e.EventID, e.Reason, e.ErrorMessage, e.Type)
		}
		fixed.Store(e.EventID, true)
	}

	res, err := redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: qc.Name}, Actor: "test",
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	if err != nil || res.Redriven != len(msgs) {
		t.Fatalf("redrive: %+v (%v)", res, err)
	}
	stop = runConsumer(t, tr, qc, handler)
	for range msgs {
		d := <-redriven
		if d.RedriveCount != 1 || d.RetryCount != 0 {
			t.Errorf("redriven %s: redrive %d retry %d, want 1 and 0", d.EventID, d.RedriveCount, d.RetryCount)
		}
	}
	stop()
	for topic, what := range map[string]string{qc.Name: "the original", kafka.ReturnTopic(qc.Name): "the redriven copy"} {
		recs, err := tr.Peek(ctx, &kafka.PeekParams{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		copies := map[string]int{}
		for _, d := range recs {
			copies[d.EventID]++
			if d.Partition != sourcePart[d.EventID] {
				t.Errorf("%s (key %s) at %s %d/%d, want its original partition %d", d.EventID, d.Key, topic, d.Partition, d.Offset, sourcePart[d.EventID])
			}
		}
		for id := range sourcePart {
			if copies[id] != 1 {
				t.Errorf("%s appears %d times on %s, want %s alone", id, copies[id], topic, what)
			}
		}
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight %d (%v), want 0", n, err)
	}
}

// TestForeignDeadLetterTopics drains dead-letter topics written by Spring
// Kafka, Kafka Connect and Kafka Streams into the catalog: their headers
// reach evidence.DecodeForeign as []byte (Spring's binary partition and
// offset included), and the entries name the foreign exception.
func TestForeignDeadLetterTopics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	queues := map[string]string{ // queue → its foreign dead-letter topic
		"spring.orders." + suffix:  "spring.orders." + suffix + "-dlt",
		"connect.orders." + suffix: "dlq-connect-orders-" + suffix,
		"streams.orders." + suffix: "streams-dlq-" + suffix,
	}
	tr := open(t, c, func(o *kafka.Options) { o.DeadLetterTopics = queues })
	for _, topic := range queues {
		if err := c.CreateTopic(topic, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	be32 := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	be64 := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	hdr := func(kv ...any) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			v, ok := kv[i+1].([]byte)
			if !ok {
				v = []byte(kv[i+1].(string))
			}
			out = append(out, kgo.RecordHeader{Key: kv[i].(string), Value: v})
		}
		return out
	}
	var springQ, connectQ, streamsQ string
	for q := range queues {
		switch q[:6] {
		case "spring":
			springQ = q
		case "connec":
			connectQ = q
		default:
			streamsQ = q
		}
	}
	recs := []*kgo.Record{
		{Topic: queues[springQ], Key: []byte("cust-9"), Value: []byte(`{"id":9}`), Headers: hdr(
			"kafka_dlt-original-topic", "orders", "kafka_dlt-original-partition", be32(2), "kafka_dlt-original-offset", be64(42),
			"kafka_dlt-exception-fqcn", "java.lang.IllegalStateException", "kafka_dlt-exception-message", "boom",
			"kafka_dlt-original-consumer-group", "billing")},
		{Topic: queues[connectQ], Value: []byte("row"), Headers: hdr(
			"__connect.errors.topic", "orders", "__connect.errors.partition", "1", "__connect.errors.offset", "7",
			"__connect.errors.stage", "VALUE_CONVERTER", "__connect.errors.exception.class.name", "org.apache.kafka.connect.errors.DataException",
			"__connect.errors.exception.message", "Converting byte[] to Kafka Connect data failed", "__connect.errors.connector.name", "jdbc-sink")},
		{Topic: queues[streamsQ], Value: []byte("evt"), Headers: hdr(
			"__streams.errors.topic", "orders", "__streams.errors.partition", "0", "__streams.errors.offset", "99",
			"__streams.errors.exception", "org.apache.kafka.common.errors.SerializationException", "__streams.errors.message", "bad magic byte")},
	}
	if err := tr.Client().ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		system, errType string
		part            int32
		off             int64
	}{
		springQ:  {evidence.SystemSpringKafka, "java.lang.IllegalStateException", 2, 42},
		connectQ: {evidence.SystemKafkaConnect, "org.apache.kafka.connect.errors.DataException", 1, 7},
		streamsQ: {evidence.SystemKafkaStreams, "org.apache.kafka.common.errors.SerializationException", 0, 99},
	}
	store := openCatalog(t)
	for q, w := range want {
		if depth, err := tr.DeadLetterDepth(ctx, q); err != nil || depth != 1 {
			t.Errorf("%s: depth %d (%v), want 1", q, depth, err)
		}
		if n, err := store.Ingest(ctx, tr, q); err != nil || n != 1 {
			t.Fatalf("%s: ingest %d (%v), want 1", q, n, err)
		}
		es := entries(t, store, q)
		if len(es) != 1 {
			t.Fatalf("%s: %d entries, want 1", q, len(es))
		}
		e := es[0]
		if e.ErrorType != w.errType {
			t.Errorf("%s: error type %q, want %q", q, e.ErrorType, w.errType)
		}
		fs := evidence.DecodeForeign(e.Headers)
		if len(fs) != 1 || fs[0].System != w.system || !fs[0].HasPartition || fs[0].Partition != w.part || !fs[0].HasOffset || fs[0].Offset != w.off {
			t.Errorf("%s: foreign evidence %+v, want %s at %d/%d", q, fs, w.system, w.part, w.off)
		}
		if _, ok := e.Headers["kafka_dlt-original-partition"]; ok {
			if b, isBytes := e.Headers["kafka_dlt-original-partition"].([]byte); !isBytes || len(b) != 4 {
				t.Errorf("Spring's partition header reached the catalog as %T %v, want the 4 raw bytes", e.Headers["kafka_dlt-original-partition"], e.Headers["kafka_dlt-original-partition"])
			}
		}
		if e.EventID == "" {
			t.Errorf("%s: entry without an event ID", q)
		}
		// Conservation: the dead letter moved into the catalog, none left
		// behind in the topic and none invented.
		if depth, err := tr.DeadLetterDepth(ctx, q); err != nil || depth != 0 {
			t.Errorf("%s: depth after ingest %d (%v), want 0", q, depth, err)
		}
	}
}

// TestLedgerBalances runs a mixed workload through the catalog's accounted
// wrapper and checks the ledger (accepted = acked + dead-lettered + in
// flight) before and after the dead letters are ingested: those still in
// the dead-letter topic are counted through DeadLetterDepth, the ingested
// ones through the catalog, and records not consumed yet through InFlight.
func TestLedgerBalances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	tr := open(t, c)
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	// Half the messages fail, a quarter transiently: enough for the
	// breaker to open and hold them (the load decides the order), which is
	// not what this test is about.
	qc := lily.QueueConfig{Name: fmt.Sprintf("dlt.ledger.%08x", rand.Uint32()), Transport: lily.TransportKafka,
		RetryAttempts: 1, RetryBackoffMillis: new(int64(20)), Breaker: new(bool)}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 40)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i), Body: []byte{byte(i)}}
	}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	balanced := func(when string, inFlight int64) {
		t.Helper()
		rows, err := ledger.New(store).Rows(ctx, tr)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == qc.Name && (!r.Balanced() || r.InFlight != inFlight) {
				t.Errorf("%s: ledger %+v, want balanced with %d in flight", when, r, inFlight)
			}
		}
	}
	balanced("before consuming", int64(len(msgs)))
	var acked atomic.Int64
	// What happened to each message, printed if the test fails.
	var mu sync.Mutex
	seen := map[string][]string{}
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		mu.Lock()
		seen[e.EventID] = append(seen[e.EventID], fmt.Sprintf("%s(%v %v)", e.Kind, e.Reason, e.Err))
		mu.Unlock()
		if e.Kind == lily.EventAcked || e.Kind == lily.EventDeadLettered {
			acked.Add(1)
		}
	})
	stop := runConsumer(t, acc, qc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		seen[d.EventID] = append(seen[d.EventID], fmt.Sprintf("handled body %d count %d retry %d", d.Body[0], d.DeliveryCount, d.RetryCount))
		mu.Unlock()
		switch d.Body[0] % 4 {
		case 0:
			return lily.Permanent(errors.New("bad"))
		case 1:
			return errors.New("always failing")
		}
		return nil
	}), hook)
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			for id, ev := range seen {
				t.Logf("%s: %v", id, ev)
			}
			mu.Unlock()
		}
	})
	transporttest.WaitFor(t, "every message settled", func() bool { return acked.Load() == int64(len(msgs)) })
	stop()
	balanced("dead letters in the topic", 0)
	if n, err := store.Ingest(ctx, tr, qc.Name); err != nil || n != 20 {
		t.Fatalf("ingest %d (%v), want 20", n, err)
	}
	balanced("dead letters ingested", 0)
}
