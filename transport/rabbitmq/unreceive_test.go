package rabbitmq_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// A message of a foreign producer — no message_id, header types Lily does
// not write — that no handler saw is given back as it came: the next
// receipt has the same event ID, body and typed headers, and is a first
// delivery (count 1, not cautious). A redelivery is given back with its
// count carried, so its count stays. At the end the queue is empty: every
// message acked once.
func TestUnreceiveForeignMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("unreceive", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	headers := amqp.Table{"x-foreign-decimal": amqp.Decimal{Scale: 2, Value: 1234}, "x-foreign-u32": uint32(7), "x-foreign-bytes": []byte{0, 1}}
	for _, body := range []string{"first", "second"} {
		if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{Body: []byte(body), Headers: headers,
			DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(n int) []*transport.Delivery {
		t.Helper()
		return receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Wait: 100 * time.Millisecond, Consumer: "c"}, n)
	}
	first := receive(2)
	if err := tr.Unreceive(ctx, &transport.UnreceiveParams{Consumer: "c", Deliveries: first}); err != nil {
		t.Fatalf("Unreceive: %v", err)
	}
	again := receive(2)
	byBody := map[string]*transport.Delivery{}
	for _, d := range first {
		byBody[string(d.Body)] = d
	}
	for _, d := range again {
		was := byBody[string(d.Body)]
		if was == nil || d.EventID != was.EventID || d.DeliveryCount != 1 {
			t.Errorf("given back %q: event ID %q (was %+v), delivery %d; want the same identity as a first delivery", d.Body, d.EventID, was, d.DeliveryCount)
			continue
		}
		for k, v := range was.Headers {
			if !reflect.DeepEqual(d.Headers[k], v) {
				t.Errorf("header %s: %#v, was %#v: want it as sent", k, d.Headers[k], v)
			}
		}
	}
	// Released once, the first comes back as a redelivery (count 2): given
	// back too, its copy carries the count, so the next receipt is delivery
	// 2 again — neither raised (a requeue would) nor reset (a plain copy
	// would) — with the same identity.
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: again[0], Action: transport.Release}}}); err != nil {
		t.Fatal(err)
	}
	var redelivered *transport.Delivery
	for _, d := range receive(1) {
		redelivered = d
	}
	if redelivered.DeliveryCount != 2 {
		t.Fatalf("after a release: delivery %d, want 2", redelivered.DeliveryCount)
	}
	if err := tr.Unreceive(ctx, &transport.UnreceiveParams{Consumer: "c", Deliveries: []*transport.Delivery{redelivered}}); err != nil {
		t.Fatalf("Unreceive of a redelivery: %v", err)
	}
	var back *transport.Delivery
	for _, d := range receive(1) {
		back = d
	}
	if back.EventID != redelivered.EventID || back.DeliveryCount != 2 || string(back.Body) != string(redelivered.Body) {
		t.Fatalf("the redelivery given back came back as %q %s delivery %d; want %q %s delivery 2",
			back.Body, back.EventID, back.DeliveryCount, redelivered.Body, redelivered.EventID)
	}
	for k, v := range redelivered.Headers {
		if k != "x-delivery-count" && !reflect.DeepEqual(back.Headers[k], v) { // the broker's count is the broker's
			t.Errorf("header %s of the redelivery given back: %#v, was %#v: want it as sent", k, back.Headers[k], v)
		}
	}
	if v := back.Headers[evidence.HeaderPriorDeliveries]; v != int32(1) {
		t.Errorf("%s = %#v, want int32 1 (the release; this hand-out no handler saw is not counted)", evidence.HeaderPriorDeliveries, v)
	}
	ss := []transport.Settlement{{Delivery: back, Action: transport.Ack}, {Delivery: again[1], Action: transport.Ack}}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}
	// Nothing left, nothing invented: the queue is empty and the broker
	// hands out nothing more (its statistics API lags, so ask the queue).
	if ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Wait: 200 * time.Millisecond, Consumer: "c"}); err != nil || len(ds) != 0 {
		t.Errorf("after acking both: received %d more (%v), want none", len(ds), err)
	}
	if q, err := ch.QueueDeclarePassive(qc.Name, true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("queue holds %d ready (%v), want 0", q.Messages, err)
	}
}
