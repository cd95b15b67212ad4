package cli

import (
	"strings"
	"testing"
	"time"
)

// TestAlertsInboxTwinsRule: LilyInboxTwins is written for RabbitMQ queues
// only (the one transport whose messages without an ID get content IDs),
// and 'promtool test rules' shows it fire on the first twin, stay up for
// an hour and resolve.
func TestAlertsInboxTwinsRule(t *testing.T) {
	cfg := writeConfig(t, brokerAlertsConfig)
	code, out, stderr := run(t, "alerts", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if n := strings.Count(out, `alert: "LilyInboxTwins"`); n != 1 {
		t.Errorf("LilyInboxTwins appears %d times, want once (the one RabbitMQ queue)", n)
	}
	if want := `sum by (queue) (increase(lily_inbox_twins_total{queue="orders.created"}[1h])) > 0`; !strings.Contains(out, want) {
		t.Errorf("rules lack %q", want)
	}
	if strings.Contains(out, `lily_inbox_twins_total{queue="payments.captured"}`) || strings.Contains(out, `lily_inbox_twins_total{queue="local.jobs"}`) {
		t.Error("a twins rule for a queue off RabbitMQ")
	}

	promtool := needPromtool(t)
	rulesFile, rf := checkedRules(t, promtool, cfg, alertOptions{config: cfg, spikeFactor: 3, spikeMin: 10, breakerFor: 15 * time.Minute,
		keyHeldFor: 10 * time.Minute, brokerFor: 5 * time.Minute})
	const alert = "LilyInboxTwins"
	var firing promExpAlerts
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				firing = promExpAlerts{
					ExpLabels: map[string]string{"severity": r.Labels.Severity, "queue": "orders.created", "owner": r.Labels.Owner},
					ExpAnnotations: map[string]string{"summary": strings.Replace(r.Annotations.Summary, "{{ $value | humanize }}", "2", 1),
						"description": r.Annotations.Description, "runbook": r.Annotations.Runbook},
				}
			}
		}
	}
	if firing.ExpLabels == nil {
		t.Fatal("no LilyInboxTwins rule")
	}
	none := []promExpAlerts{}
	promtoolTest(t, promtool, rulesFile, "lily-inbox-rules.test.yml", []promTest{{
		// Two twins at 10m, then none: the hour's increase is 2 until they
		// leave the window. Duplicates (redeliveries) alone never fire it.
		Interval: "1m",
		InputSeries: []promSeries{
			{`lily_inbox_twins_total{queue="orders.created",instance="a"}`, "0x10 2x100"},
			{`lily_inbox_duplicates_total{queue="orders.created",instance="a"}`, "0+3x110"},
		},
		AlertTests: []promAlertTest{
			{"5m", alert, none},
			{"30m", alert, []promExpAlerts{firing}},
			{"80m", alert, none},
		},
	}})
}
