package rabbitmq_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// brokerURL is the broker the tests use: LILY_RABBITMQ_URL or the local one.
func brokerURL() string {
	if u := os.Getenv("LILY_RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

// open connects to the real broker. Without one the test skips loudly —
// except under CI=true, where it fails.
func open(t *testing.T) *rabbitmq.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: brokerURL()})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is required under CI=true and unreachable at %s: %v", brokerURL(), err)
		}
		t.Skipf("SKIPPING: RabbitMQ unreachable at %s (%v) — start it with 'rabbitmq-server -detached'", brokerURL(), err)
	}
	return tr
}

func harness() transporttest.Harness {
	return transporttest.Harness{
		Name: "rabbitmq",
		New:  func(t *testing.T) transport.Transport { return open(t) },
		DeadLetters: func(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
			ds, err := tr.(*rabbitmq.Transport).Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(queue)})
			return transporttest.DeadLettersOf(queue, ds, err)
		},
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := tr.(*rabbitmq.Transport).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*rabbitmq.Transport).DeleteQueues(ctx, spec)
		},
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, harness())
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers, a hanging dependency, a dead-lettered probe, a graceful
// hand-over) on the broker.
func TestLoad(t *testing.T) {
	transporttest.RunLoad(t, harness())
}

// TestOrdering runs the park and block scenarios on the broker, with the
// catalog (and the held keys) in a SQLite file.
func TestOrdering(t *testing.T) {
	transporttest.RunOrdering(t, transporttest.OrderingHarness{
		Name: "rabbitmq",
		Open: openAccounted,
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*ledger.Accounted).Unwrap().(*rabbitmq.Transport).DeleteQueues(ctx, spec)
		},
	})
}
