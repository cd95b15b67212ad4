package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// TestConsumerRefusesClassicQueue: a consumer pointed at a classic queue
// (one that existed before Lily, registered rather than declared) does not
// start: Run returns transport.ErrUnsafeQueue naming the queue, its type
// and the fix, and the handler never runs — on a classic queue nothing
// counts deliveries, so a crash-type poison message would loop forever.
// The message waiting there stays where it was.
func TestConsumerRefusesClassicQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := open(t)
	defer tr.Close()
	qc := randomQueue("qtype.classic", lily.QueueConfig{})
	_, ch := rawChannel(t)
	if _, err := ch.QueueDeclare(qc.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, c := rawChannel(t)
		c.QueueDelete(qc.Name, false, false, false)
	})
	tr.Register(qc.Spec())
	// Confirmed, so that the broker holds it before anything counts it.
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{MessageId: "waiting-1", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	var calls atomic.Int64
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		calls.Add(1)
		return nil
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = c.Run(runCtx)
	if !errors.Is(err, transport.ErrUnsafeQueue) {
		t.Fatalf("Run on a classic queue returned %v, want ErrUnsafeQueue", err)
	}
	if runCtx.Err() != nil {
		t.Error("Run returned only when its context ended: it should refuse at once")
	}
	for _, want := range []string{qc.Name, "classic queue", "quorum", "lily topology apply"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times on a classic queue", n)
	}
	// Conservation: the waiting message is still ready, untouched.
	st, err := ch.QueueDeclarePassive(qc.Name, true, false, false, false, nil)
	if err != nil || st.Messages != 1 {
		t.Errorf("classic queue holds %d messages (%v), want the 1 waiting", st.Messages, err)
	}
	// A quorum queue of the same transport is consumed as before.
	ok := lily.QueueConfig{Name: qc.Name + ".quorum", Transport: lily.TransportRabbitMQ}.WithDefaults()
	declared(t, tr, ok)
	if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: ok.Name, Consumer: "qtype"}); err != nil {
		t.Errorf("Receive on a quorum queue: %v", err)
	}
	if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Consumer: "qtype"}); !errors.Is(err, transport.ErrUnsafeQueue) {
		t.Errorf("Receive on the classic queue again: %v, want ErrUnsafeQueue", err)
	}
}
