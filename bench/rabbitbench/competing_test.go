package rabbitbench

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/bench/internal/idcount"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// needBroker skips loudly without a RabbitMQ broker, except under CI=true,
// where it fails.
func needBroker(t *testing.T) {
	t.Helper()
	conn, err := amqp.Dial(rabbitmq.DefaultURL)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is required under CI=true and unreachable at %s: %v", rabbitmq.DefaultURL, err)
		}
		t.Skipf("SKIPPING: RabbitMQ unreachable at %s (%v) — start it with 'rabbitmq-server -detached'", rabbitmq.DefaultURL, err)
	}
	conn.Close()
}

// TestCompeting runs both competing-consumer measurements on a small N:
// each must end with every published message handled exactly once (the
// run's own conservation check: queue and DLQ empty) and report it.
func TestCompeting(t *testing.T) {
	needBroker(t)
	for _, run := range []struct {
		name string
		fn   func(context.Context, Config) (Result, error)
	}{{"plain", PlainAckCompeting}, {"lily", LilyAckCompeting}} {
		t.Run(run.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			res, err := run.fn(ctx, Config{N: 2000, Consumers: 4})
			if err != nil {
				t.Fatal(err)
			}
			c := res.Competition
			if c == nil || c.Consumers != 4 || c.Published != 2000 || c.Handled != 2000 || c.Duplicates != 0 {
				t.Fatalf("competition %+v, want 4 consumers, 2000 published and handled, 0 duplicates", c)
			}
		})
	}
}

// TestCompetitionCheck checks that a duplicate or a missing message fails
// the run's check.
func TestCompetitionCheck(t *testing.T) {
	k := idcount.New(3)
	for _, id := range []string{"a", "b", "a"} {
		k.Handled(id)
	}
	if err := competition(k, 4, 3).check(); err == nil {
		t.Fatal("a duplicate passed the check")
	}
	if err := (&Competition{Consumers: 4, Published: 3, Handled: 2}).check(); err == nil {
		t.Fatal("a missing message passed the check")
	}
	if err := (&Competition{Consumers: 4, Published: 3, Handled: 3}).check(); err != nil {
		t.Fatal(err)
	}
}
