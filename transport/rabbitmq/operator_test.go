package rabbitmq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// operatorHarness runs the operator paths on the broker, through tr
// wrapped with a ledger on the catalog cat opens for each scenario. A
// queue's exchange routes to every queue bound to it, so the "failing
// consumer alone" scenario runs beside another team's queue bound with
// the same routing key; the DLQ honours dlq_max_length with
// reject-publish (a full DLQ), and a copy that cannot fit frame_max is
// refused (an oversized dead letter). The scenarios share tr (each on
// its queues): a transport's close waits up to 2 s for the acks a
// channel just sent (quiet.go), which per scenario made half the run.
func operatorHarness(tr *rabbitmq.Transport, cat func(t *testing.T) *catalog.Store) transporttest.OperatorHarness {
	return transporttest.OperatorHarness{
		Name: "rabbitmq",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			s := cat(t)
			return ledger.Account(tr, ledger.New(s)), s
		},
		Teardown: func(ctx context.Context, _ transport.Transport, spec transport.QueueSpec) error {
			return tr.DeleteQueues(ctx, spec)
		},
		FanOut:        bindOther,
		PublishShared: publishThroughExchange,
		FullDLQ:       true,
		Oversized:     publishOversized,
	}
}

// bindOther declares another team's queue bound to queue's exchange with
// queue's routing key, as an audit log or a search indexer would bind
// one; drain reads it empty. What a publish confirmed was routed before
// the confirm, so an empty get means all there is was read.
func bindOther(ctx context.Context, t *testing.T, _ transport.Transport, queue string) func() map[string]int {
	t.Helper()
	spec := lily.QueueConfig{Name: queue, Transport: lily.TransportRabbitMQ}.WithDefaults().Spec()
	_, ch := rawChannel(t)
	other := fmt.Sprintf("analytics.%08x", rand.Uint32())
	if _, err := ch.QueueDeclare(other, false, false, false, false, nil); err != nil {
		t.Fatalf("declare %s: %v", other, err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(other, false, false, false) })
	if err := ch.QueueBind(other, queue, spec.Exchange, false, nil); err != nil {
		t.Fatalf("bind %s to %s with %s: %v", other, spec.Exchange, queue, err)
	}
	return func() map[string]int {
		seen := map[string]int{}
		for {
			d, ok, err := ch.Get(other, true)
			if err != nil {
				t.Fatalf("get from %s: %v", other, err)
			}
			if !ok {
				return seen
			}
			id, _ := d.Headers[evidence.HeaderEventID].(string)
			if id == "" {
				id = d.MessageId
			}
			seen[id]++
		}
	}
}

// publishThroughExchange publishes msgs as another service's producer
// does, through queue's exchange with queue's routing key, so that every
// queue bound with that key gets a copy; it returns once the broker
// confirmed each.
func publishThroughExchange(ctx context.Context, t *testing.T, _ transport.Transport, queue string, msgs []lily.Message) {
	t.Helper()
	spec := lily.QueueConfig{Name: queue, Transport: lily.TransportRabbitMQ}.WithDefaults().Spec()
	_, ch := rawChannel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, spec.Exchange, queue, true, false, amqp.Publishing{
			MessageId: m.EventID, Type: m.Type, DeliveryMode: amqp.Persistent, Body: m.Body, Headers: amqp.Table{"tenant": "acme"}})
		if err != nil {
			t.Fatalf("publish %s through %s: %v", m.EventID, spec.Exchange, err)
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish %s through %s: confirmed %v (%v)", m.EventID, spec.Exchange, ok, err)
		}
	}
}

// publishOversized publishes, below Lily, a message whose header frame
// leaves no room for any evidence under frame_max: the queue takes it,
// its dead-letter copy cannot be made to fit.
func publishOversized(ctx context.Context, t *testing.T, _ transport.Transport, queue string) string {
	t.Helper()
	conn, ch := rawChannel(t)
	id := fmt.Sprintf("big-%08x", rand.Uint32())
	if err := ch.PublishWithContext(ctx, "", queue, true, false, sizedPublishing(t, id, conn.Config.FrameSize-20)); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOperatorPaths runs the operator paths (redrive, to the failing
// queue alone, redirect, sample, rate, cancel, a runner that dies
// mid-job, a full DLQ, an oversized dead letter) on the broker with the
// catalog in a SQLite file.
func TestOperatorPaths(t *testing.T) {
	t.Parallel()
	tr := open(t)
	t.Cleanup(func() { tr.Close() })
	transporttest.OperatorPaths(t, operatorHarness(tr, tempCatalog))
}

// TestOperatorPathsPostgresCatalog runs them with the catalog on
// PostgreSQL.
func TestOperatorPathsPostgresCatalog(t *testing.T) {
	t.Parallel()
	tr := open(t)
	t.Cleanup(func() { tr.Close() })
	transporttest.OperatorPaths(t, operatorHarness(tr, func(t *testing.T) *catalog.Store {
		s, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}))
}
