package rabbitmq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestHandOffKeepsPropertiesAndHeaders publishes a message the way a
// foreign publisher would (AMQP properties, headers of several types, a
// per-message TTL), fails it once (retry) and then permanently, and checks
// the dead-letter copy: body and original headers untouched, properties
// kept, message_id = event ID, x-retry-count a long-int, no per-message TTL.
func TestHandOffKeepsPropertiesAndHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("props", lily.QueueConfig{RetryAttempts: 1, RetryBackoffMillis: new(int64(30))})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	stamp := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	body := []byte{0xde, 0xad, 0xbe, 0xef, 0x00, '{'}
	orig := amqp.Table{"tenant": "acme", "attempt-budget": int32(3), "flag": true, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{
		Headers: orig, ContentType: "application/json", ContentEncoding: "identity", DeliveryMode: amqp.Persistent,
		Priority: 3, CorrelationId: "corr-7", ReplyTo: "replies", Expiration: "600000", MessageId: "evt-foreign-1",
		Timestamp: stamp, Type: "order.created", AppId: "shop-web", Body: body,
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	var dead atomic.Bool
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventDeadLettered {
			dead.Store(true)
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		calls++
		if d.EventID != "evt-foreign-1" || d.Type != "order.created" {
			t.Errorf("delivery event %q type %q", d.EventID, d.Type)
		}
		if calls == 1 {
			return errors.New("transient")
		}
		if got := d.Headers[evidence.HeaderRetryCount]; got != int32(1) {
			t.Errorf("x-retry-count on the retried copy = %#v, want int32(1) (AMQP long-int)", got)
		}
		return lily.Permanent(errors.New("bad"))
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 1, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook},
		Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 30*time.Second, dead.Load)
	// Conservation: the one message is dead-lettered, once, and nothing is
	// left in the queue or its buckets.
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 1 {
		t.Errorf("dead-letter queue holds %d (%v), want 1", n, err)
	}
	d, ok, err := ch.Get(rabbitmq.DeadLetterQueue(qc.Name), true)
	if err != nil || !ok {
		t.Fatalf("no dead letter: %v", err)
	}
	if string(d.Body) != string(body) {
		t.Errorf("body %x, want %x", d.Body, body)
	}
	for k, v := range orig {
		if d.Headers[k] != v {
			t.Errorf("header %s = %#v, want %#v", k, d.Headers[k], v)
		}
	}
	if d.ContentType != "application/json" || d.ContentEncoding != "identity" || d.Priority != 3 || d.CorrelationId != "corr-7" ||
		d.ReplyTo != "replies" || d.AppId != "shop-web" || d.Type != "order.created" || !d.Timestamp.Equal(stamp) {
		t.Errorf("properties not kept: %+v", d)
	}
	if d.MessageId != "evt-foreign-1" {
		t.Errorf("message_id %q, want the event ID", d.MessageId)
	}
	if d.Expiration != "" {
		t.Errorf("per-message TTL %q copied into the DLQ: it would expire silently", d.Expiration)
	}
	if d.Headers[evidence.HeaderRetryCount] != int32(1) || d.Headers[evidence.HeaderReason] != "permanent" {
		t.Errorf("evidence: retry count %#v reason %#v", d.Headers[evidence.HeaderRetryCount], d.Headers[evidence.HeaderReason])
	}
	if calls != 2 {
		t.Errorf("handler called %d times, want 2", calls)
	}
}
