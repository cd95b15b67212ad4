package kafka_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestBlockHoldsThePartition checks ordering "block" on a log: a record
// that is dead-lettered stops its partition — no later record of the
// partition, whatever its key, reaches the handler — until its head is
// redriven and processed; then the partition's records are processed in
// their log order, and the ledger balances.
func TestBlockHoldsThePartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	tr := open(t, c, func(o *kafka.Options) { o.Partitions = 1 })
	cat, err := catalog.Open(ctx, filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	acc := ledger.Account(tr, ledger.New(cat))
	q := lily.QueueConfig{Name: "ledger.postings", Transport: lily.TransportKafka, Ordering: lily.OrderingBlock, Breaker: new(bool)}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	bodies := []string{"A/0", "K/0", "A/1", "K/1", "A/2", "K/2", "A/3"}
	msgs := make([]lily.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = lily.Message{Key: b[:1], Body: []byte(b)}
	}
	if err := lily.Publish(ctx, acc, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	log := &transporttest.BodyLog{Fail: func(body string) error {
		if body == "K/1" && !fixed.Load() {
			return lily.Permanent(errors.New("posting K/1 debits a closed account"))
		}
		return nil
	}}
	processed := log.Firsts
	cons, err := lily.NewConsumer(acc, log, lily.ConsumerOptions{Queue: q, Keys: redrive.NewKeys(cat), KeyPoll: 20 * time.Millisecond, ReceiveWait: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, cons)

	var held []redrive.HeldKey
	transporttest.WaitFor(t, "the partition blocked with 3 records behind K/1", func() bool {
		held, err = redrive.NewKeys(cat).HeldKeys(ctx, q.Name)
		return err == nil && len(held) == 1 && held[0].Parked == 3
	})
	if held[0].Key != "partition:0" || held[0].Mode != lily.OrderingBlock || held[0].HeadEventID != msgs[3].EventID {
		t.Errorf("held = %+v, want partition:0 blocked behind K/1", held[0])
	}
	if got := processed(); !slices.Equal(got, []string{"A/0", "K/0", "A/1"}) {
		t.Fatalf("processed %v while the partition was blocked, want [A/0 K/0 A/1]", got)
	}
	if _, err := cat.Ingest(ctx, acc, q.Name); err != nil {
		t.Fatal(err)
	}
	held, err = redrive.NewKeys(cat).HeldKeys(ctx, q.Name)
	if err != nil || len(held) != 1 || held[0].Head == nil {
		t.Fatalf("held after ingest = %+v (%v): want the head in the catalog", held, err)
	}
	fixed.Store(true)
	target := func(context.Context, string) (redrive.Publisher, error) { return tr, nil }
	if res, err := redrive.New(cat).Redrive(ctx, redrive.Params{Filter: catalog.Filter{IDs: []int64{held[0].Head.ID}}, Target: target}); err != nil || res.Redriven != 1 {
		t.Fatalf("redrive of the head = %+v, %v", res, err)
	}
	transporttest.WaitFor(t, "the partition processed to the end and free", func() bool {
		ks, err := redrive.NewKeys(cat).HeldKeys(ctx, q.Name)
		return err == nil && len(ks) == 0 && len(processed()) == len(bodies)
	})
	if got := processed(); !slices.Equal(got, bodies) {
		t.Errorf("processed in order %v, want the log order %v", got, bodies)
	}
	stop()
	transporttest.WaitFor(t, "the ledger balanced", func() bool {
		rows, err := ledger.New(cat).Rows(ctx, acc)
		return err == nil && len(rows) == 1 && rows[0] == ledger.Row{Queue: q.Name, Accepted: 7, Acked: 7}
	})
}
