package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// TestStopConsumerFences: a consumer that acknowledged a burst one by one
// and stops (CancelConsume, then StopConsumer, as the runtime's graceful
// stop does) fences its acknowledgements before its channel closes — with
// messages still ready, by giving the queue's head back as a confirmed
// copy (it moves to the tail, its count unchanged); on an empty queue with
// basic.get alone. Either way nothing acknowledged comes back, nothing is
// lost, nothing is counted twice: a new consumer receives exactly the
// messages not acknowledged, each as a first delivery, and then the queue
// is empty.
func TestStopConsumerFences(t *testing.T) {
	t.Parallel()
	for _, left := range []int{20, 0} {
		t.Run(fmt.Sprintf("%d-left", left), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			qc := randomQueue("fence", lily.QueueConfig{})
			tr := openDeclared(t, qc)
			_, ch := rawChannel(t)
			const acked = 40
			// Confirmed, all of them, before the stop: the order checked
			// below is the queue's once every publish has landed.
			bodies := make([][]byte, acked+left)
			for i := range bodies {
				bodies[i] = fmt.Appendf(nil, "m-%02d", i)
			}
			rawPublishAll(ctx, t, qc.Name, bodies)
			p := transport.ReceiveParams{Queue: qc.Name, Wait: 100 * time.Millisecond, Consumer: "c", Prefetch: acked}
			got := receiveN(t, tr, p, acked)
			if err := tr.CancelConsume(ctx, &transport.StopParams{Queue: qc.Name, Consumer: "c"}); err != nil {
				t.Fatal(err)
			}
			// What the cancel kept (it takes the head with basic.get, so that
			// nothing pushed before it is dropped) is given back uncounted.
			drained, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: acked + left, Consumer: "c"})
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Unreceive(ctx, &transport.UnreceiveParams{Consumer: "c", Deliveries: drained}); err != nil {
				t.Fatal(err)
			}
			// One settlement a frame: a burst, as handlers finishing together send.
			for _, d := range got {
				if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tr.StopConsumer(ctx, &transport.StopParams{Queue: qc.Name, Consumer: "c"}); err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				if q, err := ch.QueueDeclarePassive(qc.Name, true, false, false, false, nil); err != nil || q.Messages != 0 {
					t.Fatalf("after the stop the queue holds %d ready (%v), want 0: every message was acknowledged", q.Messages, err)
				}
				return
			}
			rest := receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Wait: 100 * time.Millisecond, Consumer: "d", Prefetch: left}, left)
			var order []string
			for _, d := range rest {
				order = append(order, string(d.Body))
				if d.DeliveryCount != 1 {
					t.Errorf("%s: delivery %d after the stop, want 1 (no handler saw it before)", d.Body, d.DeliveryCount)
				}
			}
			// The queue's order after the stop: what stayed ready, then the
			// copies given back, and the fence moved the head of that to the tail.
			given := map[string]bool{}
			var want []string
			for _, d := range drained {
				given[string(d.Body)] = true
			}
			for i := acked; i < acked+left; i++ {
				if b := fmt.Sprintf("m-%02d", i); !given[b] {
					want = append(want, b)
				}
			}
			for _, d := range drained {
				want = append(want, string(d.Body))
			}
			want = append(want[1:], want[0])
			if fmt.Sprint(order) != fmt.Sprint(want) {
				t.Fatalf("after the stop the queue holds %v; want %v (the fence's copy of the head last)", order, want)
			}
			ss := make([]transport.Settlement, len(rest))
			for i, d := range rest {
				ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
			}
			if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
				t.Fatal(err)
			}
			if ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Wait: 200 * time.Millisecond, Consumer: "d"}); err != nil || len(ds) != 0 {
				t.Errorf("after acking all: received %d more (%v), want none", len(ds), err)
			}
		})
	}
}
