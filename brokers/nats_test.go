package brokers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// TestNATSQueueFromConfiguration: a queue with transport = "nats" opens
// the NATS transport with nats_url, nats_ack_wait_seconds and
// nats_retention, and a published message reaches its stream, counted in
// flight; its dead-letter stream is peeked empty.
func TestNATSQueueFromConfiguration(t *testing.T) {
	url := natstest.URL(t)
	name := fmt.Sprintf("brokers.nats.%d", time.Now().UnixNano())
	c := parse(t, fmt.Sprintf(`
nats_url = %q
nats_ack_wait_seconds = 45
nats_retention = "limits"
[[queue]]
name = %q
transport = "nats"
`, url, name))
	if o := NATSOptions(c); o.URL != url || o.AckWait != 45*time.Second || o.Retention != nats.RetentionLimits || o.Queues != nil {
		t.Errorf("options %+v: want nats_url, a 45 s AckWait and limits retention", o)
	}
	adopt := parse(t, fmt.Sprintf("[nats_queues.%q]\nstream = \"ORDERS\"\nconsumer = \"svc\"\n[[queue]]\nname = %q\ntransport = \"nats\"\n", name, name))
	if o := NATSOptions(adopt); o.Queues[name] != (nats.Binding{Stream: "ORDERS", Consumer: "svc"}) {
		t.Errorf("nats_queues: options.Queues %+v", o.Queues)
	}
	s := New(c, Options{})
	defer s.Close()
	ctx := context.Background()
	q, _ := c.Queue(name)
	tr, err := s.ForQueue(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	nt := tr.(*nats.Transport)
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nt.DeleteQueue(context.Background(), q.Spec()) })
	if err := lily.Publish(ctx, tr, name, []lily.Message{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 1 {
		t.Errorf("in flight %d (%v), want 1", n, err)
	}
	if ds, err := s.PeekDeadLetters(ctx, q, 10); err != nil || len(ds) != 0 {
		t.Errorf("dead letters %d (%v), want none", len(ds), err)
	}
}
