package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// A delivery the client library dropped (it reached the channel after the
// cancel of its consumer tag) is held by the broker on the channel,
// unacknowledged, and by nobody in the process. The consumer sees the gap
// in the channel's delivery tags when the next delivery arrives and gives
// the dropped one back: it returns (its count raised) and is handled;
// nothing stays unacknowledged.
func TestDroppedDeliveryIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("holes", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	publish := func(body string) {
		t.Helper()
		if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	receive := func() *transport.Delivery {
		t.Helper()
		return receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Prefetch: 1, Wait: 100 * time.Millisecond, Consumer: "c"}, 1)[0]
	}
	ack := func(d *transport.Delivery) {
		t.Helper()
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, body := range []string{"first", "dropped", "third"} {
		publish(body)
	}
	// The prefetch (1) is full with "first": the get takes "dropped".
	first := receive()
	if string(first.Body) != "first" {
		t.Fatalf("received %q, want first", first.Body)
	}
	if ok, err := tr.DropDelivery(qc.Name, "c"); err != nil || !ok {
		t.Fatalf("basic.get on the consumer's channel: %v, %v; want a message", ok, err)
	}
	ack(first)
	got := map[string]int{}
	for range 2 {
		d := receive()
		got[string(d.Body)] = d.DeliveryCount
		ack(d)
	}
	if got["third"] != 1 || got["dropped"] != 2 {
		t.Errorf("after the drop received %v (body → delivery count); want third (count 1) and the dropped message given back (count 2)", got)
	}
	// Conservation: the three messages published were each received and
	// acked once; nothing is ready in the queue or held by the consumer.
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
	q, err := ch.QueueDeclarePassive(qc.Name, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages ready at the end, want 0", q.Messages)
	}
}
