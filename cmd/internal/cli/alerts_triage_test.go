package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/config"
)

// A group triaged known_issue keeps LilyDLQNotEmpty quiet (its entries are
// held, but lily_dlq_alarming_entries leaves them out), while a new
// fingerprint raises it again, and the retention deadline and an inflow
// spike still alarm — checked with 'promtool test rules' on the generated
// rules.
func TestAlertsKnownIssueWithPromtool(t *testing.T) {
	promtool := needPromtool(t)
	path := writeConfig(t, alertsConfig)
	rulesFile := writeRules(t, path, "--dlq-floor", "0")
	cfg, err := config.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	rf := alertRules(cfg, alertOptions{config: path, dlqFloor: 0, spikeFactor: 3, spikeMin: 10, breakerFor: 15 * time.Minute, keyHeldFor: 10 * time.Minute})
	firing := func(queue, name, value string) promExpAlerts {
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if g.Name == "lily."+queue && r.Alert == name {
					summary := strings.NewReplacer("{{ $value | humanize }}", value, "{{ $value | humanizeDuration }}", value).Replace(r.Annotations.Summary)
					return promExpAlerts{
						ExpLabels:      map[string]string{"severity": r.Labels.Severity, "queue": queue, "owner": r.Labels.Owner},
						ExpAnnotations: map[string]string{"summary": summary, "description": r.Annotations.Description, "runbook": r.Annotations.Runbook},
					}
				}
			}
		}
		t.Fatalf("no rule %s for %s", name, queue)
		return promExpAlerts{}
	}
	none := []promExpAlerts{}
	tests := []promTest{
		{ // 40 held entries, all of a known_issue group, for 20m; then a new fingerprint
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_dlq_entries{queue="orders.created",state="pending"}`, "40x20 41x10"},
				{`lily_dlq_alarming_entries{queue="orders.created"}`, "0x20 1x10"},
				{`lily_dlq_oldest_entry_age_seconds{queue="orders.created"}`, "3000 3000 7200x28"},
				{`lily_dlq_inflow_total{queue="orders.created",reason="permanent"}`, "0x20 1x10"},
			},
			AlertTests: []promAlertTest{
				{"15m", "LilyDLQNotEmpty", none}, // known: quiet
				// the deadline still alarms while the group is known
				{"15m", "LilyDLQEntryPastHalfRetention", []promExpAlerts{firing("orders.created", "LilyDLQEntryPastHalfRetention", "2h 0m 0s")}},
				{"25m", "LilyDLQNotEmpty", []promExpAlerts{firing("orders.created", "LilyDLQNotEmpty", "1")}}, // a new fingerprint
			},
		},
		{ // a known group whose inflow spikes: the spike alarms, NotEmpty stays quiet
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_dlq_alarming_entries{queue="orders.created"}`, "0x420"},
				{`lily_dlq_inflow_total{queue="orders.created",reason="permanent"}`, "0+1x400 460+60x20"},
			},
			AlertTests: []promAlertTest{
				{"410m", "LilyDLQNotEmpty", none},
				{"410m", "LilyDLQInflowSpike", []promExpAlerts{firing("orders.created", "LilyDLQInflowSpike", "")}},
			},
		},
	}
	promtoolTest(t, promtool, rulesFile, "lily-triage-rules.test.yml", tests)
}
