package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
)

// TestLateAnswerGivenBack: a pull that gave up on its answer (the server
// answered neither by its expiry nor within the margin, seen under load)
// keeps its reply subject for a while, and a message the server still
// sends there is NAKed at once instead of staying leased to nobody until
// AckWait. The pull here is the test's own, with a minute's expiry, its
// give-up simulated; AckWait is an hour, so the message can be back
// within the test's wait only through the NAK. It is then received again,
// counted twice, and acked: nothing left behind.
func TestLateAnswerGivenBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := open(t, func(o *nats.Options) { o.AckWait = time.Hour })
	qc := lily.QueueConfig{Name: fmt.Sprintf("late.%08x", rand.Uint32()), Transport: lily.TransportNATS}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
	c, done, err := tr.GiveUpOnPull(ctx, qc.Name, time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, qc.Name, []lily.Message{{Body: []byte("late")}}); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	waittest.ForState(t, "the late answer to be received again (AckWait is an hour: only a NAK brings it back)", func() (bool, string) {
		var err error
		ds, err = tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Wait: 100 * time.Millisecond, Consumer: "c"})
		state := fmt.Sprintf("received %d (%v)", len(ds), err)
		if info, err := c.Info(ctx); err == nil {
			state += fmt.Sprintf("; consumer: delivered %d, ack pending %d", info.Delivered.Consumer, info.NumAckPending)
		}
		return err == nil && len(ds) == 1, state
	})
	if string(ds[0].Body) != "late" || ds[0].DeliveryCount != 2 {
		t.Fatalf("after the give-back: %q counted %d, want the message again, counted twice", ds[0].Body, ds[0].DeliveryCount)
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	waittest.ForState(t, "nothing in flight", func() (bool, string) {
		n, err := tr.InFlight(ctx, qc.Name)
		return err == nil && n == 0, fmt.Sprintf("%d %v", n, err)
	})
	<-done // its request, a batch of one, was fulfilled by the late message
}
