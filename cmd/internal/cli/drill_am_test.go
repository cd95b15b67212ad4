package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/drill"
)

// startAlertmanager runs Debian's Alertmanager on a free loopback port,
// routing every alert to a receiver that sends nothing, until the test
// ends; it returns its base URL.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	bin := needPrometheusBin(t, "prometheus-alertmanager", "to receive the drill's alert", "the drill's Alertmanager check is NOT run")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	// group_wait 0s: the first notification of a group is not the point;
	// the API lists an alert as soon as Prometheus sent it.
	if err := os.WriteFile(cfg, []byte("route:\n  receiver: quiet\n  group_wait: 0s\nreceivers:\n  - name: quiet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, "alertmanager", bin, func(addr string) []string {
		// An empty cluster address: no gossip port, no peers.
		return []string{"--config.file=" + cfg, "--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr,
			"--cluster.listen-address=", "--log.level=warn"}
	})
}

// TestDrillAlertmanager: the alert step asks Alertmanager, to which a
// real Prometheus sends the alerts of Lily's rules; it passes when the
// queue's alert is active there.
func TestDrillAlertmanager(t *testing.T) {
	bin := needPrometheus(t)
	am := startAlertmanager(t)
	s := newDrillSetup(t, lily.TransportSQLite, "", "")
	s.consume(t)
	serve := startServe(t, "--config", s.cfg, "--listen", "127.0.0.1:0")
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if code, out, errOut := run(t, "alerts", "--config", s.cfg, "--out", rules); code != 0 {
		t.Fatalf("lily alerts: exit %d %s %s", code, out, errOut)
	}
	startPrometheusAlerting(t, bin, map[string]string{"lily-serve": strings.TrimPrefix(serve, "http://")}, strings.TrimPrefix(am, "http://"), rules)
	code, rep, errOut := s.drill(t, "--alertmanager", am, "--console", serve, "--alert-timeout", "30s")
	if code != 0 || !rep.Passed {
		t.Errorf("drill: exit %d, passed %v: %s\n%+v", code, rep.Passed, errOut, rep.Steps)
	}
	wantSteps(t, rep, nil)
	if d := step(t, rep, drill.StepAlert).Detail; !strings.Contains(d, "Alertmanager at "+am) || !strings.Contains(d, "firing") {
		t.Errorf("alert step %q, want the alert active in Alertmanager", d)
	}
	s.checkDrillConservation(t, rep, true)
}

// TestDrillKafka: the drill on another transport, Kafka (kfake in the
// test's process): the dead letter goes to the queue's dead-letter topic
// and reaches the catalog through the ingest of 'lily serve'; the
// redriven drill message comes back on the queue's return topic and is
// acked by the drill path. No Prometheus: the alert step is not checked.
func TestDrillKafka(t *testing.T) {
	_, brokers := newKafka(t)
	s := newDrillSetup(t, lily.TransportKafka, brokers, "")
	s.consume(t)
	serve := startServe(t, "--config", s.cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "200ms")
	code, rep, errOut := s.drill(t, "--console", serve)
	if code != 0 || !rep.Passed {
		t.Errorf("drill: exit %d, passed %v: %s\n%+v", code, rep.Passed, errOut, rep.Steps)
	}
	wantSteps(t, rep, map[string]string{drill.StepAlert: drill.NotChecked})
	s.checkDrillConservation(t, rep, true)
}
