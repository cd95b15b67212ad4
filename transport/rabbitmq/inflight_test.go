package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestInFlightWithoutManagementAPI: an unreachable management API leaves
// the AMQP counts (ready messages, this process's deliveries), not an
// error.
func TestInFlightWithoutManagementAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := openWith(t, rabbitmq.Options{Management: &rabbitmq.Management{URL: "http://127.0.0.1:1"}})
	defer tr.Close()
	qc := randomQueue("inflight.nomgmt", lily.QueueConfig{})
	declared(t, tr, qc)
	if err := lily.Publish(ctx, tr, qc.Name, []lily.Message{{Body: []byte("a")}, {Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	transporttest.WaitFor(t, "one delivery", func() bool {
		got, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Prefetch: 1, Wait: 50 * time.Millisecond, Consumer: "c"})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
		return len(ds) == 1
	})
	p, err := tr.InFlightParts(ctx, qc.Name)
	if err != nil || p.Ready != 1 || p.Unacked != 1 || p.Total() != 2 {
		t.Errorf("in flight without the management API: %+v, %v; want 1 ready + 1 unacked (this process's)", p, err)
	}
	// Conservation: both messages end acked.
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	transporttest.WaitFor(t, "the second delivery", func() bool {
		got, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Prefetch: 1, Wait: 50 * time.Millisecond, Consumer: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return false
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: got[0], Action: transport.Ack}}}); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after both acks: %d, %v", n, err)
	}
}
