package demo_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
)

// TestDemoKafka runs the demo on a cluster given with --brokers, so that
// the ledger can be checked afterwards. (The demo on its own in-process
// Kafka runs as the README writes it, in the root package's
// TestReadmeCommands, which fails on any loss: the same demo code on the
// same kfake, started by cmd/lily-demo.)
func TestDemoKafka(t *testing.T) {
	t.Parallel()
	brokers := demotest.Kafka(t, nil)
	db := filepath.Join(t.TempDir(), "catalog.db")
	demotest.RunBroker(t, lilyDemo, lily.TransportKafka, "--brokers", brokers, "--db", db)
	// The cluster outlives the demo: reconcile counts its side too.
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nkafka_brokers = [%q]\n[[queue]]\nname = %q\ntransport = \"kafka\"\nretry_attempts = 3\nretry_backoff_millis = 20\nmax_retry_backoff_millis = 80\nretry_jitter_ratio = 0.2\n",
		db, brokers, demo.DefaultQueue))
	code, out, errOut := run(t, "reconcile", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconciled
	mustJSON(t, out, &rec)
	if !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 300 || rec.Queues[0].Discarded != 6 {
		t.Errorf("reconcile after the demo: %s", out)
	}
}

// TestDemoBadBrokers: a --brokers value that is not host:port,... exits 2
// naming the flag, before anything is sent; so does an unknown transport.
func TestDemoBadBrokers(t *testing.T) {
	t.Parallel()
	if code, _, errOut := lilyDemo(t, "--transport", "kafka", "--brokers", "kafka-1"); code != 2 || !strings.Contains(errOut, "--brokers") {
		t.Errorf("demo --brokers kafka-1: exit %d %q, want 2 naming --brokers", code, errOut)
	}
	if code, _, errOut := lilyDemo(t, "--transport", "carrier-pigeon"); code != 2 || !strings.Contains(errOut, "must be sqlite, rabbitmq, kafka, sqs, pubsub, nats or azqueue") {
		t.Errorf("demo --transport carrier-pigeon: exit %d %q", code, errOut)
	}
}
