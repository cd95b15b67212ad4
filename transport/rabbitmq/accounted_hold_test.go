package rabbitmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// countLogs counts the log records whose message contains want.
type countLogs struct {
	want string
	n    *atomic.Int64
}

func (c countLogs) Enabled(context.Context, slog.Level) bool { return true }
func (c countLogs) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, c.want) {
		c.n.Add(1)
	}
	return nil
}
func (c countLogs) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c countLogs) WithGroup(string) slog.Handler      { return c }

// TestAccountedHoldsThroughCatalogOutage (review finding on
// ledger.Accounted.Receive): with the catalog unable to count, a
// consumer on a quorum queue with delivery_limit 2 retries its receive for
// a while; nothing is released, so no delivery count is raised — after the
// catalog is back every message is handled once, as a first delivery, and
// the ledger balances. (Releasing the batch on every failed receive, as
// before, pushed the messages past delivery_limit.)
func TestAccountedHoldsThroughCatalogOutage(t *testing.T) {
	ctx := context.Background()
	tr := open(t)
	t.Cleanup(func() { tr.Close() })
	cat := tempCatalog(t)
	qc := randomQueue("hold", lily.QueueConfig{DeliveryLimit: new(2)})
	declared(t, tr, qc)
	msgs := make([]transport.Message, 5)
	for i := range msgs {
		msgs[i] = transport.Message{EventID: fmt.Sprintf("h%d", i), Body: fmt.Appendf(nil, "m%d", i)}
	}
	// Published by another service (not through Accounted): counted as
	// accepted when first received.
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: qc.Name, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.DB().Exec(`ALTER TABLE lily_ledger_events RENAME TO lily_ledger_events_away`); err != nil {
		t.Fatal(err)
	}
	held := new(atomic.Int64)
	acct := ledger.AccountWith(tr, ledger.New(cat), ledger.AccountOptions{Log: slog.New(countLogs{"holding them unacknowledged", held})})
	retries := new(atomic.Int64)
	var mu sync.Mutex
	seen := map[string][]int{} // event ID → delivery counts handled
	c, err := lily.NewConsumer(acct, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		mu.Lock()
		seen[d.EventID] = append(seen[d.EventID], d.DeliveryCount)
		mu.Unlock()
		return nil
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 50 * time.Millisecond, Logger: slog.New(countLogs{"receive failed", retries})})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	defer stop()
	// Several failed receives (the consumer backs off 50, 100, 200 ms, …):
	// enough for the old behaviour to have released the batch past the
	// delivery limit.
	transporttest.WaitFor(t, "the consumer to retry its receive 4 times", func() bool { return retries.Load() >= 4 })
	mu.Lock()
	handled := len(seen)
	mu.Unlock()
	if handled != 0 || held.Load() < 1 {
		t.Fatalf("during the outage: %d handled, %d outage reports; want 0 and at least 1", handled, held.Load())
	}
	if _, err := cat.DB().Exec(`ALTER TABLE lily_ledger_events_away RENAME TO lily_ledger_events`); err != nil {
		t.Fatal(err)
	}
	transporttest.WaitFor(t, "all 5 messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 5
	})
	stop()
	for id, counts := range seen {
		if len(counts) != 1 || counts[0] != 1 {
			t.Errorf("%s handled with delivery counts %v, want once, as a first delivery", id, counts)
		}
	}
	rows, err := ledger.New(cat).Rows(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue == qc.Name && (r.Accepted != 5 || r.Acked != 5 || r.DeadLettered != 0 || !r.Balanced()) {
			t.Errorf("ledger %+v, want 5 accepted and acked, none dead-lettered, balanced", r)
		}
	}
}
