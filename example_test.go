package lily_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// order is the message body of the example queue.
type order struct {
	ID  int    `json:"id"`
	SKU string `json:"sku"`
}

// Example_consumer runs a consumer on the embedded SQLite transport: two
// well-formed orders are acknowledged, a malformed one is dead-lettered at
// once (a decode error is permanent: no retry can fix it), and the ledger
// accounts for all three.
func Example_consumer() {
	dir, err := os.MkdirTemp("", "lily-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tr, err := sqlite.Open(ctx, filepath.Join(dir, "lily.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()

	q := lily.QueueConfig{Name: "orders.created"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		fmt.Println(err)
		return
	}
	err = lily.Publish(ctx, tr, q.Name, []lily.Message{
		{EventID: "order-1", Type: "order.created", Body: []byte(`{"id":1,"sku":"A-100"}`)},
		{EventID: "order-2", Type: "order.created", Body: []byte(`{"id":2,`)},
		{EventID: "order-3", Type: "order.created", Body: []byte(`{"id":3,"sku":"C-300"}`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		var o order
		if err := json.Unmarshal(d.Body, &o); err != nil {
			return lily.Permanent(fmt.Errorf("decode order: %w", err))
		}
		return nil // stored
	})

	// Stop once all three messages are settled.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var settled atomic.Int64
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		switch e.Kind {
		case lily.EventAcked, lily.EventDeadLettered:
			if settled.Add(1) == 3 {
				stop()
			}
		}
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{
		Queue:   q,
		Name:    "orders-worker",
		Version: "v1.0.0",
		Hooks:   []lily.Hook{hook},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Run(runCtx); err != nil {
		fmt.Println(err)
		return
	}

	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		fmt.Println(err)
		return
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rows {
		fmt.Printf("%s: accepted=%d acked=%d dead_lettered=%d discarded=%d in_flight=%d lost=%d\n",
			r.Queue, r.Accepted, r.Acked, r.DeadLettered, r.Discarded, r.InFlight, r.Lost)
	}
	err = cat.Each(ctx, catalog.Filter{Queue: q.Name}, func(e *catalog.Entry) error {
		fmt.Printf("dead letter %s: reason=%s state=%s\n", e.EventID, e.Reason, e.State)
		fmt.Printf("  error: %s (%s)\n", e.ErrorMessage, e.ErrorType)
		fmt.Printf("  consumer version: %s, deliveries: %d, body: %s\n", e.ConsumerVersion, e.DeliveryCount, e.Body)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}

	// Output:
	// orders.created: accepted=3 acked=2 dead_lettered=1 discarded=0 in_flight=0 lost=0
	// dead letter order-2: reason=permanent state=pending
	//   error: permanent: decode order: unexpected end of JSON input (*json.SyntaxError)
	//   consumer version: v1.0.0, deliveries: 1, body: {"id":2,
}
