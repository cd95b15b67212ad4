package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestServeIngestsKafkaDeadLetterTopic: records another framework wrote
// to a queue's dead-letter topic show in lily_broker_dlq_messages (the
// topic's end offsets past the drain group's) while nobody ingests, and
// reach the catalog once 'lily serve' ingests; the gauge falls to 0.
func TestServeIngestsKafkaDeadLetterTopic(t *testing.T) {
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	ctx := context.Background()
	cluster, brokers := newKafka(t)
	db, cat := newCatalogFile(t)
	const queue, dlt = "billing", "billing-dlt"
	cfg := kafkaConfig(t, db, brokers, queue, fmt.Sprintf("[kafka_dead_letter_topics]\n%q = %q\n", queue, dlt))
	if err := cluster.CreateTopic(dlt, 2, nil); err != nil {
		t.Fatal(err)
	}
	k := openTestKafka(t, brokers, func(o *kafka.Options) { o.DeadLetterTopics = map[string]string{queue: dlt} })
	produce := func(from, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Topic: dlt, Key: []byte(fmt.Sprintf("acct-%d", i)), Value: []byte(fmt.Sprintf(`{"account":%d}`, i)),
				Headers: []kgo.RecordHeader{{Key: "kafka_dlt-original-topic", Value: []byte(queue)},
					{Key: "kafka_dlt-exception-message", Value: []byte("no such account")}}})
		}
		if err := k.Client().ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 3)
	q := fmt.Sprintf(`{queue=%q}`, queue)
	idle := serveProcess(t, "--config", cfg, "--listen", "127.0.0.1:0", "--no-ingest")
	if got := idle.waitMetric(t, "lily_broker_dlq_messages"+q, 3); got != 3 { // the broker read may come a scrape later
		t.Errorf("--no-ingest: lily_broker_dlq_messages = %g, want the 3 records not ingested", got)
	}
	idle.stop(t)
	if strings.Contains(idle.out.String(), "ingesting") {
		t.Errorf("--no-ingest printed an ingest: %q", idle.out.String())
	}
	if n, _ := catalogtest.Entries(t, cat, queue); n != 0 {
		t.Fatalf("--no-ingest ingested %d", n)
	}

	s := serveProcess(t, "--config", cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms", "--ingest-lease-ttl", "2s")
	waitEntries(t, cat, queue, 3)
	produce(3, 2)
	waitEntries(t, cat, queue, 5)
	for series, want := range map[string]float64{"lily_broker_dlq_messages" + q: 0, "lily_ingest_total" + q: 5, "lily_ingest_lease_held" + q: 1} {
		if got := s.waitMetric(t, series, want); got != want {
			t.Errorf("%s = %g, want %g", series, got, want)
		}
	}
}
