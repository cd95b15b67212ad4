package rabbitmq_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// TestRedeliveryOverFrameMaxIsRead: a message published below Lily whose
// header frame is 20 bytes under frame_max comes back 6 bytes over it on
// its first redelivery (the quorum queue adds x-delivery-count). A plain
// amqp091 consumer closes its connection on that frame, every time; Lily
// reads it, with its count, and the connection carries on — as it does
// for a body Lily publishes larger than frame_max, which travels in
// frames the broker takes.
func TestRedeliveryOverFrameMaxIsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("frame.redeliver", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	conn, ch := rawChannel(t)
	frameMax := conn.Config.FrameSize
	near := sizedPublishing(t, "near-1", frameMax-20)
	for _, p := range []amqp.Publishing{near, {MessageId: "small-1", Body: []byte("small")}} {
		if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, p); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(want int) map[string]*transport.Delivery {
		t.Helper()
		// Bounded: without the frameConn the connection closes on every
		// attempt and the receive would go on for ever.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got := map[string]*transport.Delivery{}
		for len(got) < want {
			ds, err := tr.Receive(rctx, &transport.ReceiveParams{Queue: qc.Name, Max: 4, Wait: time.Second, Consumer: "near"})
			if err != nil {
				t.Fatalf("receive with %d of %d: %v", len(got), want, err)
			}
			for _, d := range ds {
				got[d.EventID] = d
			}
		}
		return got
	}
	first := receive(2)
	if c := first["near-1"].DeliveryCount; c != 1 {
		t.Fatalf("first delivery counted %d, want 1", c)
	}
	// The consumer's channel closes as when its process dies: both come
	// back, counted twice.
	if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "near"}); err != nil {
		t.Fatal(err)
	}
	again := receive(2)
	d := again["near-1"]
	if d.DeliveryCount != 2 || d.Headers["blob"] != near.Headers["blob"] {
		t.Fatalf("redelivery: count %d, blob of %d bytes; want 2 and the original %d bytes",
			d.DeliveryCount, len(toString(d.Headers["blob"])), len(toString(near.Headers["blob"])))
	}
	// A body three frames long, published through Lily on the same
	// connection, arrives whole.
	body := bytes.Repeat([]byte("0123456789abcdef"), 3*frameMax/16)
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: qc.Name, Messages: []transport.Message{{EventID: "long-1", Body: body}}}); err != nil {
		t.Fatalf("publish a body of %d bytes (frame_max %d): %v", len(body), frameMax, err)
	}
	long := receive(1)["long-1"]
	if long == nil || !bytes.Equal(long.Body, body) {
		t.Fatalf("the long body did not arrive whole")
	}
	var ss []transport.Settlement
	for _, d := range []*transport.Delivery{again["near-1"], again["small-1"], long} {
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatalf("ack on the same connection: %v", err)
	}
	conserveForeign(t, tr, nil, qc.Name, []string{"near-1", "small-1", "long-1"}, map[string]int{"near-1": 1, "small-1": 1, "long-1": 1})
}

func toString(v any) string { s, _ := v.(string); return s }
