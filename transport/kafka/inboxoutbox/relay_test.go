package inboxoutbox_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestRelayToKafka: the relay publishes through the Kafka transport
// (acks=all, on kfake): every row arrives once with its event ID, and each
// key's records are in its partition in the order they were added.
func TestRelayToKafka(t *testing.T) {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, err := kafka.Open(ctx, kafka.Options{Brokers: c.ListenAddrs(), Partitions: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	const topic = "orders.created"
	qc := lily.QueueConfig{Name: topic, Transport: lily.TransportKafka}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "app.db"), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 2 { // as on every store: Migrate is idempotent
		if err := outbox.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	const rows = 30
	ids := map[string]bool{}
	for i := range rows {
		ms := []outbox.Message{{Queue: topic, Message: lily.Message{Key: "acct-" + strconv.Itoa(i%3), Body: []byte(strconv.Itoa(i))}}}
		addCommitted(t, db, ms...)
		ids[ms[0].EventID] = true
	}
	r, err := outbox.NewRelay(db, tr, outbox.RelayOptions{Batch: 8, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	effecttest.RelayAll(t, r)

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	last := map[string]int{}
	got := 0
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for got < rows {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("%d of %d records read", got, rows)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			got++
			n, _ := strconv.Atoi(string(rec.Value))
			if p, ok := last[string(rec.Key)]; ok && p >= n {
				t.Errorf("key %s: %d after %d", rec.Key, n, p)
			}
			last[string(rec.Key)] = n
			var id string
			for _, h := range rec.Headers {
				if h.Key == evidence.HeaderEventID {
					id = string(h.Value)
				}
			}
			if !ids[id] {
				t.Errorf("record %s has event ID %q, not one the outbox assigned", rec.Value, id)
			}
			delete(ids, id)
		})
	}
	if len(ids) != 0 {
		t.Fatalf("%d events never arrived", len(ids))
	}
}

// addCommitted writes msgs to the outbox in one committed business
// transaction.
func addCommitted(t *testing.T, db *sql.DB, msgs ...outbox.Message) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := outbox.Add(context.Background(), tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
