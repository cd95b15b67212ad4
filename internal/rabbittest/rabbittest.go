// Package rabbittest gives tests the machine's RabbitMQ (docs/design.md §11): its
// URL, once the broker answered — without a broker the test is skipped
// with a loud message, except under CI=true, where it fails — a producer
// that publishes below Lily, as other services do, and the cleanup of the
// queues a test declared.
package rabbittest

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// URL returns the test broker's URL — LILY_RABBITMQ_URL, or the machine's
// broker (rabbitmq.DefaultURL) — after dialling it once.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("LILY_RABBITMQ_URL")
	if u == "" {
		u = rabbitmq.DefaultURL
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is required under CI=true and unreachable at %s: %v", u, err)
		}
		t.Skipf("SKIPPING: RabbitMQ unreachable at %s (%v) — start it with 'rabbitmq-server -detached'", u, err)
	}
	conn.Close()
	return u
}

// WithManagement returns the test broker's URL once its management API
// answered too: the tests of what only that API can read (lily lint
// --live's argument checks, topology verify). Without it the test is
// skipped with a loud message — a fresh broker has the plugin off, and
// Lily must not silently depend on it — except under CI=true, where it
// fails (.ci/run enables the plugin).
func WithManagement(t testing.TB) string {
	t.Helper()
	u := URL(t)
	m, err := rabbitmq.ManagementFor(u)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var overview map[string]any
		_, err = m.Get(ctx, "/api/overview", &overview)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the RabbitMQ management API is required under CI=true and does not answer for %s: %v", u, err)
		}
		t.Skipf("SKIPPING: the RabbitMQ management API does not answer for %s (%v) — enable it with 'rabbitmq-plugins enable rabbitmq_management'", u, err)
	}
	return u
}

// Publish publishes pubs to queue through the default exchange with a
// plain amqp091 client — no Lily: message_id, headers and properties as
// given — mandatory, and waits for every confirm.
func Publish(ctx context.Context, t testing.TB, url, queue string, pubs ...amqp.Publishing) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("raw amqp091 dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range pubs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
		if err != nil {
			t.Fatalf("raw publish to %s: %v", queue, err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("raw publish to %s not confirmed: ok %v, %v", queue, ok, err)
		}
	}
}

// DeleteQueues deletes the queues of the specs (main, buckets, DLQ) from
// the broker at url when the test ends, so that a shared broker does not
// collect them.
func DeleteQueues(t testing.TB, url string, specs ...transport.QueueSpec) {
	t.Cleanup(func() {
		ctx := context.Background()
		tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
		if err != nil {
			return
		}
		defer tr.Close()
		tr.DeleteQueues(ctx, specs...)
	})
}
