package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/config"
)

// brokerAlertsConfig has a queue on RabbitMQ, one on Kafka and one on the
// SQLite store (no broker DLQ: no LilyBrokerDLQNotIngested).
const brokerAlertsConfig = `
rabbitmq_url = "amqp://guest:guest@127.0.0.1:5672/"
kafka_brokers = ["127.0.0.1:9092"]

[[queue]]
name = "orders.created"
owner = "team-checkout"
transport = "rabbitmq"

[[queue]]
name = "payments.captured"
transport = "kafka"

[[queue]]
name = "local.jobs"
`

func TestAlertsBrokerDLQNotIngestedRule(t *testing.T) {
	cfg := writeConfig(t, brokerAlertsConfig)
	code, out, stderr := run(t, "alerts", "--config", cfg, "--broker-dlq-for", "7m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if n := strings.Count(out, `alert: "LilyBrokerDLQNotIngested"`); n != 2 {
		t.Errorf("LilyBrokerDLQNotIngested appears %d times, want once per broker queue (2)", n)
	}
	for _, want := range []string{
		`max by (queue) (lily_broker_dlq_messages{queue="orders.created"}) > 0`,
		`unless on (queue)`,
		`sum by (queue) (increase(lily_ingest_total{queue="payments.captured"}[7m])) > 0`,
		`for: "7m"`,
		"lily dlq ingest --config " + cfg + " --queue orders.created",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules lack %q", want)
		}
	}
	if strings.Contains(out, `lily_broker_dlq_messages{queue="local.jobs"}`) {
		t.Error("a broker DLQ rule for a queue of the SQLite store")
	}
	for _, bad := range []string{"1m", "2m30.5s"} {
		if code, _, stderr := run(t, "alerts", "--config", cfg, "--broker-dlq-for", bad); code != 2 || !strings.Contains(stderr, "--broker-dlq-for "+bad) {
			t.Errorf("--broker-dlq-for %s: exit %d %s", bad, code, stderr)
		}
	}
}

// TestAlertsBrokerDLQNotIngestedFires runs the rule with 'promtool test
// rules': dead letters staying in the broker while nothing is ingested
// fire it after --broker-dlq-for; a busy DLQ that the ingest keeps
// draining does not.
func TestAlertsBrokerDLQNotIngestedFires(t *testing.T) {
	promtool := needPromtool(t)
	path := writeConfig(t, brokerAlertsConfig)
	rulesFile, rf := checkedRules(t, promtool, path, alertOptions{config: path, spikeFactor: 3, spikeMin: 10, breakerFor: 15 * time.Minute,
		keyHeldFor: 10 * time.Minute, brokerFor: 5 * time.Minute})
	firing := func(queue, value string) promExpAlerts {
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if g.Name == "lily."+queue && r.Alert == "LilyBrokerDLQNotIngested" {
					return promExpAlerts{
						ExpLabels: map[string]string{"severity": r.Labels.Severity, "queue": queue, "owner": r.Labels.Owner},
						ExpAnnotations: map[string]string{"summary": strings.Replace(r.Annotations.Summary, "{{ $value | humanize }}", value, 1),
							"description": r.Annotations.Description, "runbook": r.Annotations.Runbook},
					}
				}
			}
		}
		t.Fatalf("no LilyBrokerDLQNotIngested rule for %s", queue)
		return promExpAlerts{}
	}
	const alert = "LilyBrokerDLQNotIngested"
	none := []promExpAlerts{}
	tests := []promTest{
		{ // orders: the ingest stops at 2m with 3 dead letters left in the broker
			// (two replicas export the gauge); payments: a busy DLQ the
			// ingest keeps draining, never empty at a scrape
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_broker_dlq_messages{queue="orders.created",instance="a"}`, "0 0 3x30"},
				{`lily_broker_dlq_messages{queue="orders.created",instance="b"}`, "0 0 3x30"},
				{`lily_ingest_total{queue="orders.created",instance="a"}`, "0 4 4x30"},
				{`lily_ingest_total{queue="orders.created",instance="b"}`, "0x32"},
				{`lily_broker_dlq_messages{queue="payments.captured",instance="a"}`, "5x30"},
				{`lily_ingest_total{queue="payments.captured",instance="a"}`, "0+20x30"},
			},
			AlertTests: []promAlertTest{
				{"5m", alert, none}, // the 5m increase window still sees the last drain
				{"9m", alert, none}, // pending: the condition holds since 7m
				{"13m", alert, []promExpAlerts{firing("orders.created", "3")}},
				{"25m", alert, []promExpAlerts{firing("orders.created", "3")}},
			},
		},
		{ // nobody ingests at all (every replica --no-ingest): no lily_ingest_total
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_broker_dlq_messages{queue="payments.captured"}`, "0 2x20"},
				{`lily_broker_dlq_messages{queue="orders.created"}`, "0x20"}, // empty: quiet
			},
			AlertTests: []promAlertTest{
				{"3m", alert, none},
				{"7m", alert, []promExpAlerts{firing("payments.captured", "2")}},
			},
		},
		{ // the ingest catches up: the DLQ empties, the alert resolves
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_broker_dlq_messages{queue="orders.created"}`, "4x10 0x10"},
				{`lily_ingest_total{queue="orders.created"}`, "0x10 4x10"},
			},
			AlertTests: []promAlertTest{
				{"8m", alert, []promExpAlerts{firing("orders.created", "4")}},
				{"12m", alert, none},
			},
		},
	}
	promtoolTest(t, promtool, rulesFile, "lily-broker-rules.test.yml", tests)
}

// checkedRules writes the rules of the configuration at path with 'lily
// alerts' (and the extra flags), checks them with 'promtool check rules',
// and returns the file and the same rules built with o, to derive the
// expected alerts from.
func checkedRules(t *testing.T, promtool, path string, o alertOptions, flags ...string) (string, ruleFile) {
	t.Helper()
	rulesFile := filepath.Join(t.TempDir(), "lily-rules.yml")
	if code, out, stderr := run(t, append([]string{"alerts", "--config", path, "--out", rulesFile}, flags...)...); code != 0 {
		t.Fatalf("lily alerts: exit %d\n%s%s", code, out, stderr)
	}
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cfg, err := config.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return rulesFile, alertRules(cfg, o)
}
