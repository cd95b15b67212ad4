package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily"
)

// newKafka starts an in-process Kafka (kfake) for one test and returns
// it with its brokers as --brokers takes them.
func newKafka(t *testing.T) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, strings.Join(c.ListenAddrs(), ",")
}

// kafkaConfig writes a configuration with one kafka queue on brokers.
func kafkaConfig(t *testing.T, db, brokers, queue, extra string) string {
	t.Helper()
	var bs []string
	for _, b := range strings.Split(brokers, ",") {
		bs = append(bs, fmt.Sprintf("%q", b))
	}
	return writeConfig(t, fmt.Sprintf("db = %q\nkafka_brokers = [%s]\n%s\n[[queue]]\nname = %q\ntransport = \"kafka\"\nretry_attempts = 3\nretry_backoff_millis = 20\nmax_retry_backoff_millis = 80\nretry_jitter_ratio = 0.2\n",
		db, strings.Join(bs, ", "), extra, queue))
}

// TestDemoKafka runs the demo on a cluster given with --brokers (so that
// the ledger can be checked afterwards) and on its own in-process kfake.
func TestDemoKafka(t *testing.T) {
	t.Parallel()
	t.Run("brokers", func(t *testing.T) {
		t.Parallel()
		_, brokers := newKafka(t)
		db := filepath.Join(t.TempDir(), "catalog.db")
		got := runKafkaDemo(t, "--brokers", brokers, "--db", db)
		if got.WorkerRestarts != 2*demoQueueConfig(demoQueue, lily.TransportKafka).DeliveryLimit {
			t.Errorf("worker restarts %d, want 2 × delivery_limit (each crashing order kills the worker at deliveries 1..5)", got.WorkerRestarts)
		}
		// The cluster outlives the demo: reconcile counts its side too.
		cfg := kafkaConfig(t, db, brokers, demoQueue, "")
		code, out, errOut := run(t, "reconcile", "--config", cfg, "--json")
		if code != 0 {
			t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
		}
		var rec reconcileJSON
		mustJSON(t, out, &rec)
		if !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 300 || rec.Queues[0].Discarded != 6 {
			t.Errorf("reconcile after the demo: %s", out)
		}
	})
	t.Run("in-process", func(t *testing.T) {
		t.Parallel()
		runKafkaDemo(t, "--db", filepath.Join(t.TempDir(), "catalog.db"))
	})
}

// runKafkaDemo runs 'lily demo --transport kafka' with the RabbitMQ demo
// test's workload and checks its counts.
func runKafkaDemo(t *testing.T, args ...string) demoJSON {
	t.Helper()
	args = append([]string{"demo", "--transport", "kafka", "--messages", "300", "--malformed", "6", "--flaky", "15",
		"--hopeless", "3", "--crashing", "2", "--json"}, args...)
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", code, out, errOut)
	}
	var got demoJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := map[string]int64{"permanent": 6, "retries_exhausted": 3, "delivery_limit": 2}
	if fmt.Sprint(got.DeadLettersByReason) != fmt.Sprint(want) {
		t.Errorf("dead letters by reason %v, want exactly %v", got.DeadLettersByReason, want)
	}
	// After the second half: 6 malformed discarded, 3 hopeless and 2
	// crashing redriven to the source topic and acked by the fixed worker.
	if got.Transport != "kafka" || got.Accepted != 300 || got.Acked != 294 || got.DeadLettered != 0 || got.Discarded != 6 || got.Lost != 0 || got.InFlight != 0 {
		t.Errorf("ledger %+v, want accepted 300, acked 294, dead-lettered 0, discarded 6, lost 0", got)
	}
	if got.Redriven != 5 || got.RedriveRounds != 2 || got.NeedsManual != 0 {
		t.Errorf("redriven %d in %d rounds, needs_manual %d; want 5 in 2 rounds, 0", got.Redriven, got.RedriveRounds, got.NeedsManual)
	}
	return got
}
