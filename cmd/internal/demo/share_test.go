package demo_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
	"github.com/lily-mq/lily/lint"
)

// TestDemoKafkaShareGroup runs the demo with the queue consumed through a
// share group, on a cluster given with --brokers, so that the ledger,
// in-flight from the share-partition lag, can be checked afterwards: the
// counts are the SQLite demo's, the crashing orders dead-lettered at
// delivery_limit (4) by the broker's delivery count, before the broker's
// archive limit (5), and the inbox records each order once. (The demo on
// its own in-process Kafka runs as the README writes it, in the root
// package's TestReadmeCommands: the same code on the same kfake.)
func TestDemoKafkaShareGroup(t *testing.T) {
	t.Parallel()
	brokers := demotest.Kafka(t, demo.ShareBrokerConfigs)
	db := filepath.Join(t.TempDir(), "catalog.db")
	got := demotest.RunBroker(t, lilyDemo, lily.TransportKafka, "--brokers", brokers, "--db", db, "--share-group", "orders-workers")
	if !got.EffectsExactlyOnce || got.EffectsApplied != 294 {
		t.Errorf("inbox: %d orders recorded, exactly once %v; want 294, true", got.EffectsApplied, got.EffectsExactlyOnce)
	}
	// The cluster outlives the demo: reconcile counts its side too.
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nkafka_brokers = [%q]\n[[queue]]\nname = %q\ntransport = \"kafka\"\nkafka_share_group = \"orders-workers\"\nretry_attempts = 3\nretry_backoff_millis = 20\nmax_retry_backoff_millis = 80\nretry_jitter_ratio = 0.2\n",
		db, brokers, demo.DefaultQueue))
	code, out, errOut := run(t, "reconcile", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconciled
	mustJSON(t, out, &rec)
	if !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 300 || rec.Queues[0].Discarded != 6 || rec.Queues[0].InFlight != 0 {
		t.Errorf("reconcile after the demo: %s", out)
	}
	// The configuration the demo ran is what lint accepts on this cluster.
	code, out, errOut = run(t, "lint", "--config", cfg, "--live", "--json")
	var r lint.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("lint --live: exit %d, decode %q: %v (stderr %q)", code, out, err, errOut)
	}
	if code != 0 || r.Has("share-delivery-limit", demo.DefaultQueue) {
		t.Errorf("lint --live of the demo's queue: exit %d %+v %s", code, r.Findings, errOut)
	}
}

// TestDemoShareGroupBadInput: --share-group off Kafka, with a scenario
// other than poison, or with a name Kafka does not take exits 2, naming
// the flag, the value and the fix, before anything runs.
func TestDemoShareGroupBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--share-group", "workers"}, []string{`--share-group "workers" with --transport sqlite`, "share groups exist only on Kafka", "use --transport kafka --share-group workers, or drop --share-group"}},
		{[]string{"--transport", "rabbitmq", "--share-group", "workers"}, []string{`--share-group "workers" with --transport rabbitmq`}},
		{[]string{"--transport", "kafka", "--share-group", "workers", "--scenario", "ordering"}, []string{`--share-group "workers" with --scenario ordering`, "drop --share-group or --scenario"}},
		{[]string{"--transport", "kafka", "--share-group", "no spaces"}, []string{`--share-group "no spaces"`, "must be 1..249 characters"}},
		{[]string{"--transport", "kafka", "--share-group", "workers", "--crashing", "3", "--max-restarts", "11"}, []string{"--max-restarts 11: must be >= --crashing × delivery_limit (12)"}},
	} {
		code, _, errOut := lilyDemo(t, c.args...)
		for _, w := range c.want {
			if code != 2 || !strings.Contains(errOut, w) {
				t.Errorf("%v: exit %d %q, want exit 2 naming %q", c.args, code, errOut, w)
			}
		}
	}
}
