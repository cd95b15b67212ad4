package ledger_test

import (
	"context"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// capturePublisher records what a redrive sends.
type capturePublisher struct {
	mu   sync.Mutex
	sent []transport.Message
}

func (c *capturePublisher) Publish(_ context.Context, p *transport.PublishParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, p.Messages...)
	return nil
}

func foreignLedger(t *testing.T, s *catalog.Store, queue string) ledger.Row {
	t.Helper()
	rows, err := ledger.New(s).Rows(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue == queue {
			return r
		}
	}
	t.Fatalf("no ledger row for %s in %+v", queue, rows)
	return ledger.Row{}
}

// TestForeignQueueLedger: the dead letters ingested from a foreign DLQ are
// counted accepted in the ingest's transaction (once, however often a
// crash makes the broker hand them out again); each ends pending,
// discarded with a record or redriven (handed back to its origin); the
// ledger balances at every step; a Reason overrides the broker's.
func TestForeignQueueLedger(t *testing.T) {
	ctx := context.Background()
	catalogtest.EachStore(t, func(t *testing.T, s *catalog.Store) {
		const q = "orders_error"
		var dls []*transport.Delivery
		for _, id := range []string{"m1", "m2", "m3", "m4"} {
			d := catalogtest.Delivery(q, id, `{"order":"`+id+`"}`)
			d.Headers = transport.Headers{"MT-Reason": "fault", "MT-Fault-InputAddress": "rabbitmq://localhost/orders",
				"MT-Fault-ExceptionType": "System.InvalidOperationException", "MT-Fault-Message": "declined " + id, "MT-Fault-RetryCount": int32(2)}
			dls = append(dls, d)
		}
		n, err := s.IngestWith(ctx, &catalogtest.Drainer{Waiting: append([]*transport.Delivery(nil), dls...), Batch: 3},
			catalog.IngestParams{Queue: q, Foreign: "masstransit"})
		if err != nil || n != 4 {
			t.Fatalf("ingest: %d, %v", n, err)
		}
		// A crash between the catalog commit and the broker ack: the
		// broker hands the same four out again.
		if _, err := s.IngestWith(ctx, &catalogtest.Drainer{Waiting: dls, Batch: 4}, catalog.IngestParams{Queue: q, Foreign: "masstransit"}); err != nil {
			t.Fatal(err)
		}
		if r := foreignLedger(t, s, q); r.Accepted != 4 || r.DeadLettered != 4 || r.Lost != 0 {
			t.Fatalf("after ingest: %+v, want 4 accepted = 4 dead-lettered", r)
		}
		if kinds, err := s.ForeignQueues(ctx); err != nil || kinds[q] != "masstransit" {
			t.Errorf("foreign queues %v %v", kinds, err)
		}
		if _, err := s.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{Queue: q, EventIDs: []string{"m4"}}, Reason: "cancelled", Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		pub := &capturePublisher{}
		res, err := redrive.New(s).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: q, EventIDs: []string{"m1", "m2"}}, Actor: "test",
			Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }})
		if err != nil || res.Redriven != 2 || len(pub.sent) != 2 {
			t.Fatalf("redrive: %+v %v, sent %d", res, err, len(pub.sent))
		}
		if pub.sent[0].Headers["MT-Fault-InputAddress"] != "rabbitmq://localhost/orders" {
			t.Errorf("the foreign evidence did not travel with the redrive: %v", pub.sent[0].Headers)
		}
		if r := foreignLedger(t, s, q); r.Accepted != 4 || r.Acked != 2 || r.Discarded != 1 || r.DeadLettered != 1 || r.Lost != 0 {
			t.Errorf("after discard and redrive: %+v, want 4 accepted = 2 handed back + 1 discarded + 1 pending", r)
		}

		// MassTransit's _skipped queue: reason skipped.
		sk := catalogtest.Delivery("orders_skipped", "s1", `{}`)
		sk.Headers = transport.Headers{"MT-Reason": "dead-letter"}
		if _, err := s.IngestWith(ctx, &catalogtest.Drainer{Waiting: []*transport.Delivery{sk}, Batch: 1},
			catalog.IngestParams{Queue: "orders_skipped", Foreign: "masstransit", Reason: "skipped"}); err != nil {
			t.Fatal(err)
		}
		byReason, err := s.CountBy(ctx, "reason", catalog.Filter{Queue: "orders_skipped"})
		if err != nil || byReason["skipped"] != 1 || len(byReason) != 1 {
			t.Errorf("skipped queue reasons %v %v", byReason, err)
		}
		if r := foreignLedger(t, s, "orders_skipped"); r.Accepted != 1 || r.DeadLettered != 1 || r.Lost != 0 {
			t.Errorf("skipped ledger %+v", r)
		}
	})
}
