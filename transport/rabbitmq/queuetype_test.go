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
	"github.com/lily-mq/lily/transport/rabbitmq"
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

// TestQueueTypeReadThroughAMQP (issue 30, item 3a): with the management
// API unreachable (pointed at a closed port, as on a broker without the
// plugin), the consumer still refuses a classic queue — one without
// arguments, one with arguments of its own and x-queue-type classic —
// because the type is read through AMQP (a declare with x-queue-type
// quorum, refused for another type). Quorum queues are consumed: Lily's
// own, and one with an argument Lily does not declare. Nothing is changed
// by the check: the classic queues still hold their messages, untyped.
// Before, the check read the management API only and, unreachable, let
// the consumer run on the classic queue, where crash-type poison loops
// forever.
func TestQueueTypeReadThroughAMQP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := openWith(t, rabbitmq.Options{Management: &rabbitmq.Management{URL: "http://127.0.0.1:1"}})
	defer tr.Close()
	_, ch := rawChannel(t)
	plain := randomQueue("qtype.amqp.plain", lily.QueueConfig{})
	withArgs := randomQueue("qtype.amqp.args", lily.QueueConfig{})
	extra := randomQueue("qtype.amqp.extra", lily.QueueConfig{})
	classics := map[string]amqp.Table{
		plain.Name:    nil,
		withArgs.Name: {"x-queue-type": "classic", "x-max-length": int64(50), "x-dead-letter-exchange": "elsewhere", "x-message-ttl": int32(600000)},
	}
	for name, args := range classics {
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, c := rawChannel(t)
			c.QueueDelete(name, false, false, false)
		})
		if err := ch.PublishWithContext(ctx, "", name, true, false, amqp.Publishing{MessageId: "waiting-" + name, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	tr.Register(plain.Spec(), withArgs.Spec())
	for _, qc := range []lily.QueueConfig{plain, withArgs} {
		var calls atomic.Int64
		c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
			calls.Add(1)
			return nil
		}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = c.Run(runCtx)
		ended := runCtx.Err()
		cancel()
		if !errors.Is(err, transport.ErrUnsafeQueue) || ended != nil {
			t.Errorf("Run on classic queue %s without the management API returned %v (context ended: %v), want ErrUnsafeQueue at once", qc.Name, err, ended)
		} else if !strings.Contains(err.Error(), "classic") {
			t.Errorf("error %q does not name the classic type", err)
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("handler ran %d times on classic queue %s", n, qc.Name)
		}
	}
	// Lily's own quorum queue, and a quorum queue with an argument Lily
	// does not declare (x-max-length, e.g. set by hand): both consumed.
	declared(t, tr, lily.QueueConfig{Name: plain.Name + ".quorum", Transport: lily.TransportRabbitMQ}.WithDefaults())
	top, err := rabbitmq.Plan([]transport.QueueSpec{extra.Spec()})
	if err != nil {
		t.Fatal(err)
	}
	declared(t, tr, extra)
	if _, err := ch.QueueDelete(extra.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-max-length": int64(1000)}
	for _, q := range top.Queues {
		if q.Name == extra.Name {
			for k, v := range q.Arguments {
				args[k] = v
			}
		}
	}
	if _, err := ch.QueueDeclare(extra.Name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{plain.Name + ".quorum", extra.Name} {
		if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: q, Consumer: "qtype-amqp"}); err != nil {
			t.Errorf("Receive on quorum queue %s without the management API: %v", q, err)
		}
	}
	// Conservation, and no side effect: each classic queue still holds
	// its one message and is still classic (a quorum declare of it is
	// still refused).
	for name := range classics {
		_, c := rawChannel(t)
		st, err := c.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil || st.Messages != 1 {
			t.Errorf("classic queue %s holds %d messages (%v), want the 1 waiting", name, st.Messages, err)
		}
		if _, err := c.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err == nil {
			t.Errorf("classic queue %s accepts a quorum declare: the check changed its type", name)
		}
	}
}
