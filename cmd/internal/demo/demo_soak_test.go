//go:build soak

package demo_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
	"github.com/lily-mq/lily/internal/rabbittest"
)

// TestDemoRabbitMQ: the demo on RabbitMQ runs on every landing as
// docs/rabbitmq.md writes it (TestReadmeCommands): the demo itself fails
// unless nothing is lost, every effect is applied once and the dead
// letters are exactly the workload's classes. This run adds the exact
// figures and a reconcile of the broker's side by the CLI, with -tags soak
// (scripts/soak).
func TestDemoRabbitMQ(t *testing.T) {
	t.Parallel()
	url := rabbittest.URL(t)
	queue := fmt.Sprintf("demo%08x.created", rand.Uint32())
	rabbittest.DeleteQueues(t, url, demo.QueueConfig(queue, lily.TransportRabbitMQ, "").Spec())
	db := filepath.Join(t.TempDir(), "catalog.db")
	demotest.RunBroker(t, lilyDemo, lily.TransportRabbitMQ, "--url", url, "--queue", queue, "--db", db)
	// The queue is now non-empty on the broker? No: everything was settled,
	// and a second demo on the same queue is refused only if it holds
	// messages. Reconcile with the config counts the broker's side.
	cfg := writeConfig(t, fmt.Sprintf("rabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\nretry_attempts = 3\nretry_backoff_millis = 20\nmax_retry_backoff_millis = 80\nretry_jitter_ratio = 0.2\n", url, queue))
	code, out, errOut := run(t, "reconcile", "--db", db, "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
}
