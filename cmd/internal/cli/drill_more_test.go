package cli

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/lily-mq/lily"

	"github.com/lily-mq/lily/drill"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// alertmanagerBin is Alertmanager's program in Debian's package.
const alertmanagerBin = "prometheus-alertmanager"

// maybeAlertmanager runs Debian's Alertmanager on a free loopback port,
// routing every alert to a receiver that sends nothing, until the test
// ends; it returns its base URL and host:port, or "" when the program is
// missing (the case that needs it then skips loudly, or fails under CI).
func maybeAlertmanager(t *testing.T) (base, host string) {
	t.Helper()
	bin, err := exec.LookPath(alertmanagerBin)
	if err != nil {
		return "", ""
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	// group_wait 0s: the API lists an alert as soon as Prometheus sent it
	// either way; no notification waits on a group.
	if err := os.WriteFile(cfg, []byte("route:\n  receiver: quiet\n  group_wait: 0s\nreceivers:\n  - name: quiet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base = startDaemon(t, "alertmanager", bin, func(addr string) []string {
		// An empty cluster address: no gossip port, no peers.
		return []string{"--config.file=" + cfg, "--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr,
			"--cluster.listen-address=", "--log.level=warn"}
	})
	return base, strings.TrimPrefix(base, "http://")
}

// TestDrillKafka: the drill on another transport, Kafka (kfake in the
// test's process): the dead letter goes to the queue's dead-letter topic
// and reaches the catalog through the ingest of 'lily serve'; the
// redriven drill message comes back on the queue's return topic and is
// acked by the drill path. No Prometheus: the alert step is not checked.
func TestDrillKafka(t *testing.T) {
	t.Parallel()
	_, brokers := newKafka(t)
	drillServed(t, newDrillSetup(t, lily.TransportKafka, brokers, ""))
}

// drillServed runs the drill of s against a consumer and 'lily serve'
// (ingesting every 200 ms) with no Prometheus: every step but the alert
// passes, and the ledger balances with the drill message discarded.
func drillServed(t *testing.T, s drillSetup) {
	t.Helper()
	s.consume(t)
	serve := startServe(t, "--config", s.cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "200ms")
	code, rep, errOut := s.drill(t, "--console", serve)
	if code != 0 || !rep.Passed {
		t.Errorf("drill: exit %d, passed %v: %s\n%+v", code, rep.Passed, errOut, rep.Steps)
	}
	wantSteps(t, rep, map[string]string{drill.StepAlert: drill.NotChecked})
	s.checkDrillConservation(t, rep, true)
}

// TestDrillNATS: the drill on NATS JetStream (the tests' server): the
// dead letter goes to the queue's dead-letter stream, confirmed before the
// original is terminated, and reaches the catalog through the ingest of
// 'lily serve'; the redriven drill message comes back on the queue's
// subject and is acked by the drill path. No Prometheus: the alert step
// is not checked.
func TestDrillNATS(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	drillServed(t, newDrillSetup(t, lily.TransportNATS, url, ""))
}

// TestDrillCloudEmulators: the drill on SQS (goaws) and Pub/Sub (pstest),
// both in the test's process, the topology applied by 'lily topology
// apply', and on Azure Storage queues (Azurite): the dead letter goes to the queue's dead-letter queue or topic
// and reaches the catalog through the ingest of 'lily serve'; the
// redriven drill message comes back (on Pub/Sub to the subscription's
// retry-return topic) and is acked by the drill path.
func TestDrillCloudEmulators(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{lily.TransportSQS, lily.TransportPubSub, lily.TransportAzQueue} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "lily.db")
			queue := fmt.Sprintf("drill%08x.created", rand.Uint32())
			s := drillSetup{db: db, queue: queue, h: newDrillHandler(t)}
			steps := map[string]string{drill.StepAlert: drill.NotChecked}
			switch kind {
			case lily.TransportSQS:
				s.cfg = sqsConfig(t, db, queue, "")
			case lily.TransportAzQueue:
				s.cfg = azqueueDrillConfig(t, db, queue)
			default:
				srv := pstest.NewServer()
				t.Cleanup(func() { srv.Close() })
				s.cfg = pubsubConfig(t, db, srv.Addr, queue)
				// The Pub/Sub API cannot count a subscription's messages:
				// the drill says the balance is not checked (and what it
				// checked); the test counts from pstest's records.
				steps[drill.StepLedger] = drill.NotChecked
				s.counter = pstestCounter(t, srv)
			}
			if code, out, errOut := run(t, "topology", "apply", "--config", s.cfg); code != 0 {
				t.Fatalf("topology apply: exit %d %s %s", code, out, errOut)
			}
			s.consume(t)
			serve := startServe(t, "--config", s.cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "200ms")
			code, rep, errOut := s.drill(t, "--console", serve)
			if code != 0 || !rep.Passed {
				t.Errorf("drill: exit %d, passed %v: %s\n%+v", code, rep.Passed, errOut, rep.Steps)
			}
			wantSteps(t, rep, steps)
			if d := step(t, rep, drill.StepLedger).Detail; kind == lily.TransportPubSub &&
				(!strings.Contains(d, "cannot count") || !strings.Contains(d, "counted accepted and acked")) {
				t.Errorf("ledger detail %q, want why the balance is not checked and what was", d)
			}
			s.checkDrillConservation(t, rep, true)
		})
	}
}

// azqueueDrillConfig writes the configuration of an azqueue queue on the
// test Azurite; its queues ('lily topology apply') are deleted when the
// test ends.
func azqueueDrillConfig(t *testing.T, db, queue string) string {
	t.Helper()
	azuritetest.DeleteQueuesAtEnd(t, azuritetest.Options(t, time.Second), queue)
	return writeConfig(t, fmt.Sprintf("db = %q\nazqueue_url = %q\nazqueue_visibility_timeout_seconds = 2\n\n[[queue]]\nname = %q\ntransport = \"azqueue\"\ndelivery_limit = 3\n",
		db, azuritetest.URL(), queue))
}

// TestDrillRabbitMQWithoutIngest: a consumer dead-letters the drill
// message into RabbitMQ's dead-letter queue, but no 'lily serve' ingests
// it: the catalog step fails saying so, the dead-lettering is not checked
// (its reason shows only in the catalog), and left_behind says how to
// finish; done that way, the ledger balances.
func TestDrillRabbitMQWithoutIngest(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	s := newDrillSetup(t, lily.TransportRabbitMQ, url, "")
	s.consume(t)
	code, rep, errOut := s.drill(t, "--timeout", "2s")
	if code != 1 || rep.Passed {
		t.Errorf("drill: exit %d, passed %v, want exit 1: %s", code, rep.Passed, errOut)
	}
	wantSteps(t, rep, map[string]string{drill.StepDeadLettered: drill.NotChecked, drill.StepCatalog: drill.Failed, drill.StepAlert: drill.NotChecked,
		drill.StepConsole: drill.NotChecked, drill.StepDLQShow: drill.NotChecked, drill.StepRedrive: drill.NotChecked, drill.StepLedger: drill.Failed})
	if d := step(t, rep, drill.StepCatalog).Detail; !strings.Contains(d, "not ingested") || !strings.Contains(d, "lily serve") {
		t.Errorf("catalog detail %q, want the missing ingest named", d)
	}
	if d := step(t, rep, drill.StepDeadLettered).Detail; !strings.Contains(d, "grew from 0 to 1") {
		t.Errorf("dead_lettered detail %q, want the dead-letter queue's growth", d)
	}
	if !strings.Contains(rep.LeftBehind, "lily dlq ingest --queue "+s.queue) {
		t.Errorf("left_behind %q, want the ingest and discard", rep.LeftBehind)
	}
	for _, args := range [][]string{
		{"dlq", "ingest", "--config", s.cfg, "--queue", s.queue},
		{"dlq", "discard", "--config", s.cfg, "--queue", s.queue, "--event-ids", rep.EventID, "--reason", "lily drill"},
	} {
		if code, out, errOut := run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
	}
	s.checkDrillConservation(t, rep, false)
}

// TestDrillConsoleToken: against a 'lily serve' with tokens, the console
// step fails without one (the console does not show the entry to the
// drill) and passes with $LILY_CONSOLE_TOKEN, a viewer's.
func TestDrillConsoleToken(t *testing.T) {
	s := newDrillSetup(t, lily.TransportSQLite, "", "")
	s.consume(t)
	t.Setenv("LILY_TOKENS", "drill:viewer:s3cret-drill-token")
	serve := s.serve(t)
	code, rep, _ := s.drill(t, "--console", serve)
	if code != 1 {
		t.Errorf("drill without a token: exit %d, want 1", code)
	}
	wantSteps(t, rep, map[string]string{drill.StepAlert: drill.NotChecked, drill.StepConsole: drill.Failed})
	if d := step(t, rep, drill.StepConsole).Detail; !strings.Contains(d, "401") {
		t.Errorf("console detail %q, want the API's 401", d)
	}
	s.checkDrillConservation(t, rep, true)
	t.Setenv("LILY_CONSOLE_TOKEN", "s3cret-drill-token")
	code, rep, errOut := s.drill(t, "--console", serve)
	if code != 0 {
		t.Errorf("drill with a token: exit %d: %s %+v", code, errOut, rep.Steps)
	}
	wantSteps(t, rep, map[string]string{drill.StepAlert: drill.NotChecked})
	if row, balanced := s.ledgerOf(t); !balanced || row.Accepted != 2 || row.Acked != 2 || row.InFlight != 0 || s.h.saw(rep.EventID) {
		t.Errorf("after two drills: ledger %+v (balanced %v), handler saw the drill %v; want 2 accepted and acked", row, balanced, s.h.saw(rep.EventID))
	}
	if code, out, _ := run(t, "drill", "--help"); code != 0 || strings.Contains(out, "s3cret") {
		t.Errorf("lily drill --help: exit %d, shows the token: %s", code, out)
	}
}
