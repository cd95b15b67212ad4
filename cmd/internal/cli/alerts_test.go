package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/config"
)

// alertsConfig has a queue with an owner, retries (so a breaker) and a
// 2-hour retention, and one without an owner or breaker.
const alertsConfig = `
[[queue]]
name = "orders.created"
owner = "team-checkout"
retry_attempts = 3
dlq_retention_hours = 2

[[queue]]
name = "payments.captured"
breaker = false
ordering = "park"
`

// needPromtool returns the path of promtool. Under CI=true it must be
// there (.ci/run installs Debian's prometheus package); elsewhere the test
// skips loudly.
func needPromtool(t *testing.T) string {
	t.Helper()
	return needPrometheusBin(t, "promtool", "to validate 'lily alerts' output", "the alerting rules are NOT validated")
}

// needPrometheusBin returns the path of bin, a program of Debian's
// prometheus package, needed for why; under CI=true it must be there
// (.ci/run installs the package), elsewhere the test skips loudly saying
// what is not checked (unchecked).
func needPrometheusBin(t *testing.T, bin, why, unchecked string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		how := "apt-get install -y --no-install-recommends prometheus (Debian's package ships /usr/bin/" + bin + ")"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true %s and is not on PATH: %s", bin, why, how)
		}
		fmt.Fprintf(os.Stderr, "SKIPPING %s: %s not found — %s; %s\n", t.Name(), bin, unchecked, how)
		t.Skipf("SKIPPING: %s not found — %s", bin, how)
	}
	return p
}

// writeRules runs 'lily alerts' with args on cfg into a file and returns
// its path.
func writeRules(t *testing.T, cfg string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "lily-rules.yml")
	code, stdout, stderr := run(t, append([]string{"alerts", "--config", cfg, "--out", out}, args...)...)
	if code != 0 {
		t.Fatalf("lily alerts: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "wrote 12 alerting rules for 2 queues to "+out) {
		t.Errorf("stdout = %q, want the count of rules and the file", stdout)
	}
	return out
}

func TestAlertsRulesPerQueue(t *testing.T) {
	cfg := writeConfig(t, alertsConfig)
	code, out, stderr := run(t, "alerts", "--config", cfg, "--dlq-floor", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, `queue payments.captured has no owner: its alerts carry owner="unowned"`) {
		t.Errorf("stderr does not warn about the queue without an owner: %q", stderr)
	}
	for _, want := range []string{
		`  - name: "lily.orders.created"`,
		`  - name: "lily.payments.captured"`,
		`sum by (queue) (lily_dlq_alarming_entries{queue="orders.created"}) > 5`,
		`max by (queue) (lily_dlq_oldest_entry_age_seconds{queue="orders.created"}) > 3600`,
		`max by (queue) (lily_dlq_oldest_entry_age_seconds{queue="payments.captured"}) > 604800`, // 336h / 2
		`max by (queue) (lily_ledger_unaccounted{queue="orders.created"}) > 0`,
		`max by (queue) (lily_breaker_state{queue="orders.created"}) > 0`,
		`absent(lily_dlq_entries{queue="payments.captured"})`,
		`owner: "team-checkout"`,
		`owner: "unowned"`,
		`severity: "critical"`,
		"lily dlq list --config " + cfg,
		"lily dlq group --config " + cfg + " --queue orders.created --by reason",
		"lily dlq redrive --config " + cfg + " --queue orders.created --dry-run",
		"lily reconcile --config " + cfg,
		"--older-than 1h;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules lack %q", want)
		}
	}
	// payments.captured has no breaker: no breaker alert for it.
	if strings.Contains(out, `lily_breaker_state{queue="payments.captured"}`) {
		t.Error("a breaker alert for a queue with breaker = false")
	}
	for _, name := range []string{"LilyDLQNotEmpty", "LilyDLQInflowSpike", "LilyDLQEntryPastHalfRetention", "LilyLedgerUnaccounted", "LilyDLQMetricsAbsent"} {
		if n := strings.Count(out, `alert: "`+name+`"`); n != 2 {
			t.Errorf("%s appears %d times, want once per queue", name, n)
		}
	}
	// --out writes the same bytes.
	path := writeRules(t, cfg, "--dlq-floor", "5")
	if data, err := os.ReadFile(path); err != nil || string(data) != out {
		t.Errorf("--out file differs from standard output (%v)", err)
	}
}

// TestAlertsPromtoolCheck validates the rules (YAML and JSON) with
// 'promtool check rules'.
func TestAlertsPromtoolCheck(t *testing.T) {
	promtool := needPromtool(t)
	cfg := writeConfig(t, alertsConfig)
	yml := writeRules(t, cfg)
	js := filepath.Join(t.TempDir(), "lily-rules.json")
	if code, _, stderr := run(t, "alerts", "--config", cfg, "--json", "--out", js); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	for _, f := range []string{yml, js} {
		out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS: 12 rules found") {
			data, _ := os.ReadFile(f)
			t.Errorf("promtool check rules %s: %v\n%s\n--- rules ---\n%s", filepath.Base(f), err, out, data)
		}
	}
}

// promTest is one test group of a 'promtool test rules' file.
type promTest struct {
	Interval    string          `json:"interval"`
	InputSeries []promSeries    `json:"input_series"`
	AlertTests  []promAlertTest `json:"alert_rule_test"`
}

type promSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type promAlertTest struct {
	EvalTime  string          `json:"eval_time"`
	Alertname string          `json:"alertname"`
	ExpAlerts []promExpAlerts `json:"exp_alerts"`
}

type promExpAlerts struct {
	ExpLabels      map[string]string `json:"exp_labels"`
	ExpAnnotations map[string]string `json:"exp_annotations"`
}

// TestAlertsFireWithPromtool runs the generated rules against synthetic
// series with 'promtool test rules': each alert fires when it should,
// with its labels and annotations, and not otherwise.
func TestAlertsFireWithPromtool(t *testing.T) {
	promtool := needPromtool(t)
	path := writeConfig(t, alertsConfig)
	rulesFile := writeRules(t, path, "--dlq-floor", "5")
	cfg, err := config.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	rf := alertRules(cfg, alertOptions{config: path, dlqFloor: 5, spikeFactor: 3, spikeMin: 10, breakerFor: 15 * time.Minute, keyHeldFor: 10 * time.Minute})
	rule := func(queue, name string) alertRule {
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if g.Name == "lily."+queue && r.Alert == name {
					return r
				}
			}
		}
		t.Fatalf("no rule %s for %s", name, queue)
		return alertRule{}
	}
	// firing is the expected alert of a rule; value fills the summary's
	// {{ $value ... }}.
	firing := func(queue, name, value string) promExpAlerts {
		r := rule(queue, name)
		summary := strings.NewReplacer("{{ $value | humanize }}", value, "{{ $value | humanizeDuration }}", value).Replace(r.Annotations.Summary)
		return promExpAlerts{
			ExpLabels:      map[string]string{"severity": r.Labels.Severity, "queue": queue, "owner": r.Labels.Owner},
			ExpAnnotations: map[string]string{"summary": summary, "description": r.Annotations.Description, "runbook": r.Annotations.Runbook},
		}
	}
	none := []promExpAlerts{}
	breaker := strings.TrimSpace(strings.Repeat("2 1 ", 15))
	tests := []promTest{
		{ // depth over the floor (held states only), retention, absent metrics
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_dlq_entries{queue="orders.created",state="pending"}`, "3 3 6x20"},
				{`lily_dlq_entries{queue="orders.created",state="parked"}`, "0x22"},
				{`lily_dlq_entries{queue="orders.created",state="needs_manual"}`, "0x22"},
				{`lily_dlq_entries{queue="orders.created",state="redriven"}`, "100x22"},
				{`lily_dlq_alarming_entries{queue="orders.created"}`, "3 3 6x20"},
				{`lily_dlq_oldest_entry_age_seconds{queue="orders.created"}`, "3000 3600 7200x20"},
			},
			AlertTests: []promAlertTest{
				{"1m", "LilyDLQNotEmpty", none},
				{"5m", "LilyDLQNotEmpty", []promExpAlerts{firing("orders.created", "LilyDLQNotEmpty", "6")}},
				{"1m", "LilyDLQEntryPastHalfRetention", none},
				{"5m", "LilyDLQEntryPastHalfRetention", []promExpAlerts{firing("orders.created", "LilyDLQEntryPastHalfRetention", "2h 0m 0s")}},
				{"10m", "LilyDLQMetricsAbsent", none},
				{"20m", "LilyDLQMetricsAbsent", []promExpAlerts{firing("payments.captured", "LilyDLQMetricsAbsent", "")}},
			},
		},
		{ // the ledger off for longer than 10m; a breaker flapping open/half-open
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_ledger_unaccounted{queue="orders.created"}`, "0 0 2x30"},
				{`lily_ledger_unaccounted{queue="payments.captured"}`, "0 1 0x30"}, // one busy scrape
				{`lily_breaker_state{queue="orders.created"}`, "0 " + breaker},
				{`lily_breaker_state{queue="payments.captured"}`, "2x30"}, // no breaker rule
			},
			AlertTests: []promAlertTest{
				{"5m", "LilyLedgerUnaccounted", none},
				{"20m", "LilyLedgerUnaccounted", []promExpAlerts{firing("orders.created", "LilyLedgerUnaccounted", "2")}},
				{"10m", "LilyBreakerOpenTooLong", none},
				{"20m", "LilyBreakerOpenTooLong", []promExpAlerts{firing("orders.created", "LilyBreakerOpenTooLong", "")}},
			},
		},
		{ // a parked key on the ordered queue for longer than 10m; none on the other
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_held_keys{queue="payments.captured"}`, "0 0 1x20"},
				{`lily_held_keys{queue="orders.created"}`, "3x22"}, // reorder: no rule
			},
			AlertTests: []promAlertTest{
				{"8m", "LilyKeysHeld", none},
				{"15m", "LilyKeysHeld", []promExpAlerts{firing("payments.captured", "LilyKeysHeld", "1")}},
			},
		},
		{ // steady inflow for hours, then a burst; payments steady throughout
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_dlq_inflow_total{queue="orders.created",reason="permanent"}`, "0+1x400 460+60x20"},
				{`lily_dlq_inflow_total{queue="payments.captured",reason="retries_exhausted"}`, "0+1x420"},
			},
			AlertTests: []promAlertTest{
				{"300m", "LilyDLQInflowSpike", none},
				{"410m", "LilyDLQInflowSpike", []promExpAlerts{firing("orders.created", "LilyDLQInflowSpike", "")}},
			},
		},
		{ // dead letters where there were none (no baseline yet)
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_dlq_inflow_total{queue="payments.captured",reason="permanent"}`, "0+5x20"},
			},
			AlertTests: []promAlertTest{
				{"1m", "LilyDLQInflowSpike", none}, // 5 < --spike-min
				{"10m", "LilyDLQInflowSpike", []promExpAlerts{firing("payments.captured", "LilyDLQInflowSpike", "")}},
			},
		},
	}
	promtoolTest(t, promtool, rulesFile, "lily-rules.test.yml", tests)
}

func TestAlertsJSON(t *testing.T) {
	cfg := writeConfig(t, alertsConfig)
	code, out, stderr := run(t, "alerts", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rf ruleFile
	if err := json.Unmarshal([]byte(out), &rf); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if len(rf.Groups) != 2 || len(rf.Groups[0].Rules) != 6 || len(rf.Groups[1].Rules) != 6 {
		t.Errorf("groups = %+v, want orders.created with 6 rules, payments.captured with 6 (no breaker; held keys: ordering park)", rf.Groups)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Labels.Queue == "" || r.Labels.Owner == "" || r.Labels.Severity == "" || r.Annotations.Runbook == "" || r.Annotations.Summary == "" {
				t.Errorf("%s %s lacks a label or annotation: %+v", g.Name, r.Alert, r)
			}
		}
	}
}

func TestAlertsUsage(t *testing.T) {
	cfg := writeConfig(t, alertsConfig)
	empty := writeConfig(t, `db = "x.db"`)
	bad := writeConfig(t, "[[queue]]\nname = \"q\"\ndlq_retention_hours = -1\n")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"alerts"}, 2, "--config FILE is required"},
		{[]string{"alerts", "--config", cfg, "--dlq-floor", "-1"}, 2, "--dlq-floor -1: must be >= 0"},
		{[]string{"alerts", "--config", cfg, "--spike-factor", "0.5"}, 2, "--spike-factor 0.5"},
		{[]string{"alerts", "--config", cfg, "--spike-min", "0"}, 2, "--spike-min 0"},
		{[]string{"alerts", "--config", cfg, "--breaker-open-for", "10s"}, 2, "--breaker-open-for 10s"},
		{[]string{"alerts", "--config", cfg, "--dlq-floor", "x"}, 2, "dlq-floor"},
		{[]string{"alerts", "--config", empty}, 2, "has no [[queue]] entries"},
		{[]string{"alerts", "--config", bad}, 2, "dlq_retention_hours = -1"}, // an invalid configuration is bad input
		{[]string{"alerts", "--config", filepath.Join(t.TempDir(), "missing.toml")}, 1, "read config"},
		{[]string{"alerts", "--config", cfg, "--out", filepath.Join(t.TempDir(), "no", "such", "dir.yml")}, 1, "write the rules"},
	} {
		code, _, stderr := run(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("lily %s: exit %d, stderr %q; want exit %d mentioning %q", strings.Join(c.args, " "), code, stderr, c.code, c.msg)
		}
	}
}

func TestPromDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", 6 * time.Hour: "6h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s",
		1500 * time.Millisecond: "1s500ms", 0: "0s", 168 * time.Hour: "168h",
	} {
		if got := promDuration(d); got != want {
			t.Errorf("promDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// promtoolTest writes tests as a promtool rule test file next to rulesFile
// (named name) and runs 'promtool test rules' on it.
func promtoolTest(t *testing.T, promtool, rulesFile, name string, tests any) {
	t.Helper()
	data, err := json.MarshalIndent(map[string]any{
		"rule_files":          []string{filepath.Base(rulesFile)},
		"evaluation_interval": "1m",
		"tests":               tests,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(filepath.Dir(rulesFile), name)
	if err := os.WriteFile(testFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", filepath.Base(testFile))
	cmd.Dir = filepath.Dir(testFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
