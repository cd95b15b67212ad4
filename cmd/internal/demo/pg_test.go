package demo_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/rabbittest"
)

// The demo runs on a PostgreSQL catalog as on SQLite: its second half
// (discard, sampled redrive, the fixed worker acking) leaves the ledger
// balanced, and 'lily audit' reads its decisions there. (Every 'lily dlq'
// command on such a catalog: package cli's TestDLQCommandsPostgresCatalog.)
func TestDemoPostgresCatalog(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{lily.TransportRabbitMQ, lily.TransportKafka} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			pg := pgtest.URL(t)
			var args []string
			queue := fmt.Sprintf("pgdemo%08x.created", rand.Uint32())
			switch kind {
			case lily.TransportRabbitMQ:
				url := rabbittest.URL(t)
				rabbittest.DeleteQueues(t, url, demo.QueueConfig(queue, kind, "").Spec())
				args = append(args, "--url", url)
			case lily.TransportKafka:
				// The cluster the demo's in-process Kafka would be
				// (cmd/lily-demo's), started by the test.
				args = append(args, "--brokers", demotest.Kafka(t, demo.ShareBrokerConfigs))
			}
			got := demotest.RunBroker(t, lilyDemo, kind, append(args, "--queue", queue, "--catalog", pg)...)
			if got.Catalog == "" || got.DB != "" {
				t.Errorf("demo JSON db %q, catalog %q: want the catalog named", got.DB, got.Catalog)
			}
			// A second run on the same catalog and queue is refused: the
			// ledger would not be its own.
			code, _, errOut := lilyDemo(t, append([]string{"--transport", kind, "--messages", "10", "--malformed", "0", "--flaky", "0", "--hopeless", "0", "--crashing", "0", "--catalog", pg, "--queue", queue}, args...)...)
			if code == 0 || !strings.Contains(errOut, "already holds queue") {
				t.Errorf("second demo on the catalog: exit %d, %s", code, errOut)
			}
			code, out, errOut := run(t, "audit", "--catalog", pg, "--json")
			if code != 0 {
				t.Fatalf("audit --catalog: %d %s", code, errOut)
			}
			n := audited(t, out)
			if len(n) == 0 {
				t.Fatalf("audit JSON without records:\n%s", out)
			}
			if n["discard/discarded"] != 6 || n["redrive/redriven"] != 5 {
				t.Errorf("audit on PostgreSQL %v, want 6 discarded and 5 redriven", n)
			}
		})
	}
}
