package cli

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// planJSON runs 'lily plan args... --json' and decodes its output.
func planJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, errs := run(t, append(append([]string{"plan"}, args...), "--json")...)
	if code != 0 {
		t.Fatalf("lily plan %v: exit %d, stderr %q", args, code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return m
}

// field returns m's number at the dotted path, failing if absent.
func field(t *testing.T, m map[string]any, path string) float64 {
	t.Helper()
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", path, v)
		}
		if v, ok = obj[k]; !ok {
			t.Fatalf("JSON lacks %q: %v", path, m)
		}
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%s = %v, not a number", path, v)
	}
	return f
}

func wantExact(t *testing.T, m map[string]any, path string, want float64) {
	t.Helper()
	if got := field(t, m, path); got != want {
		t.Errorf("%s = %v, want exactly %v", path, got, want)
	}
}

func wantApprox(t *testing.T, m map[string]any, path string, want, tol float64) {
	t.Helper()
	if got := field(t, m, path); math.Abs(got-want) > tol {
		t.Errorf("%s = %v, want ≈ %v (±%v)", path, got, want, tol)
	}
}

func TestPlanOutageExamples(t *testing.T) {
	m := planJSON(t, "outage", "--rate", "2000", "--outage", "600s", "--attempts", "5", "--interval", "60s")
	wantExact(t, m, "retry_span_s", 240)
	wantExact(t, m, "dead_lettered", 720000)
	wantExact(t, m, "circulating_at_end", 480000)
	wantExact(t, m, "extra_receives_per_s", 8000)

	m = planJSON(t, "outage", "--rate", "2000", "--outage", "600s", "--attempts", "5",
		"--backoff-millis", "30000", "--max-backoff-millis", "240000")
	wantExact(t, m, "retry_span_s", 450)
	wantExact(t, m, "dead_lettered", 300000)
	if _, ok := m["extra_receives_per_s"]; ok {
		t.Errorf("extra_receives_per_s is only for a fixed interval: %v", m)
	}
	if got, want := m["delays_s"], []any{30.0, 60.0, 120.0, 240.0}; !reflect.DeepEqual(got, want) {
		t.Errorf("delays_s = %v, want %v (retry.Policy nominal delays)", got, want)
	}

	m = planJSON(t, "outage", "--rate", "2000", "--outage", "10m", "--attempts", "20", "--interval", "1m")
	wantExact(t, m, "retry_span_s", 1140)
	wantExact(t, m, "dead_lettered", 0)
	wantExact(t, m, "circulating_at_end", 1200000)
	wantExact(t, m, "extra_receives_per_s", 20000)

	m = planJSON(t, "outage", "--rate", "2000", "--outage", "600s", "--delays", "30s,60s,2m,4m")
	wantExact(t, m, "attempts", 5)
	wantExact(t, m, "dead_lettered", 300000)
}

func TestPlanOutageTable(t *testing.T) {
	code, out, errs := run(t, "plan", "outage", "--rate", "2000", "--outage", "600s", "--attempts", "5", "--interval", "60s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"retry span          240 s", "dead-lettered       720,000", "circulating at end  480,000", "extra receives      8,000 /s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("line %d has trailing spaces: %q", i+1, line)
		}
	}
}

func TestPlanIndependentExamples(t *testing.T) {
	m := planJSON(t, "independent", "--rate", "2000", "--failure-prob", "0.01", "--attempts", "3")
	wantExact(t, m, "daily_volume", 172_800_000)
	wantExact(t, m, "dead_lettered_per_day", 172.8)
	m = planJSON(t, "independent", "--rate", "2000", "--failure-prob", "0.01", "--attempts", "5")
	wantApprox(t, m, "dead_lettered_per_day", 0.0173, 0.00005)
	_, out, _ := run(t, "plan", "independent", "--rate", "2000", "--failure-prob", "0.01", "--attempts", "3")
	if !strings.Contains(out, "dead-lettered per day      172.8") {
		t.Errorf("table lacks 172.8:\n%s", out)
	}
}

func TestPlanPoisonExample(t *testing.T) {
	m := planJSON(t, "poison", "--rate", "2000", "--poison-fraction", "1e-5", "--crash-after", "2s",
		"--redelivery", "60s", "--attempts", "5", "--handler-time", "50ms")
	wantExact(t, m, "poison_per_day", 1728)
	wantApprox(t, m, "handlers_burnt_after_one_day", 57.6, 0.05)
	wantExact(t, m, "handler_seconds_per_poison", 10)
	wantExact(t, m, "healthy_concurrency", 100)

	m = planJSON(t, "poison", "--rate", "2000", "--poison-fraction", "1e-5", "--crash-after", "2s", "--redelivery", "1m")
	for _, k := range []string{"handler_seconds_per_poison", "healthy_concurrency"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s present without its flag: %v", k, m)
		}
	}
}

// TestPlanJetStreamExamples: the examples of 'lily plan jetstream --help'
// (plan.JetStream has the rules; docs/nats.md the worked numbers).
func TestPlanJetStreamExamples(t *testing.T) {
	m := planJSON(t, "jetstream", "--max-deliver", "5", "--backoff", "1s,5s,30s", "--handler-time", "50ms")
	wantExact(t, m, "lease_s", 1)
	wantExact(t, m, "poison_dead_lettered_after_s", 96)
	if m["backoff_refused"] != false || m["handler_outlives_lease"] != false {
		t.Errorf("MaxDeliver 5 over 3 BackOff entries, 50 ms handler: %v", m)
	}
	m = planJSON(t, "jetstream", "--rate", "2000", "--outage", "10m", "--attempts", "5", "--backoff-millis", "30000",
		"--max-backoff-millis", "240000", "--max-ack-pending", "20000")
	wantExact(t, m, "ack_pending_needed", 900000)
	wantExact(t, m, "ack_pending_full_after_s", 10)
	m = planJSON(t, "jetstream", "--dead-letter-rate", "0.02", "--message-bytes", "2048", "--dlq-subject", "lily.dlq.orders.created",
		"--dlq-max-msgs", "10000", "--dlq-max-age", "168h")
	wantExact(t, m, "dlq_stored_bytes", 2105)
	wantExact(t, m, "dlq_full_after_s", 500000)
	wantExact(t, m, "dead_letter_stays_s", 604800)
	if m["dlq_refuses_new"] != true || m["dlq_limited_by"] != "max_age" {
		t.Errorf("discard new with max_msgs and max_age: %v", m)
	}
	m = planJSON(t, "jetstream", "--max-deliver", "3", "--backoff", "1s,2s,3s")
	if m["backoff_refused"] != true {
		t.Errorf("MaxDeliver 3 with 3 BackOff entries: %v, want refused", m)
	}
}

func TestPlanPartitionExample(t *testing.T) {
	m := planJSON(t, "partition", "--delays", "1s,2s,4s,8s,16s", "--handler-time", "50ms",
		"--partition-rate", "20", "--poison-per-day", "1728", "--partitions", "100")
	wantExact(t, m, "attempts", 6)
	wantApprox(t, m, "blocking.stall_per_poison_s", 31.3, 0.05)
	wantApprox(t, m, "blocking.backlog_records", 626, 0.5)
	wantApprox(t, m, "blocking.stalls_per_partition_per_day", 17.3, 0.05)
	if got := field(t, m, "blocking.lost_per_partition_per_day_s") / 60; math.Abs(got-9) > 0.05 {
		t.Errorf("blocking: %v minutes lost per partition per day, want ≈ 9", got)
	}
	wantExact(t, m, "non_blocking.stall_per_poison_s", 0.05)
	wantExact(t, m, "non_blocking.backlog_records", 1)
	wantApprox(t, m, "non_blocking.stalls_per_partition_per_day", 17.3, 0.05)
	wantExact(t, m, "non_blocking.lost_per_partition_per_day_s", 0.864)

	// The same schedule given as Lily's backoff: 1000 ms doubling, 6 attempts.
	m2 := planJSON(t, "partition", "--attempts", "6", "--backoff-millis", "1000", "--max-backoff-millis", "60000",
		"--handler-time", "50ms", "--partition-rate", "20", "--poison-per-day", "1728", "--partitions", "100")
	if !reflect.DeepEqual(m["blocking"], m2["blocking"]) {
		t.Errorf("backoff schedule %v differs from explicit delays %v", m2["blocking"], m["blocking"])
	}
}

// seed003Table is the table of seed 003 as 'lily plan threshold' prints it.
const seed003Table = `  threshold  processed  wasted attempts  wrongly isolated  permanently failing isolated
          1          9               11                 9                             2
          2          9               22                 9                             2
          3         14               28                 4                             2
          5         18               36                 0                             2
          8         18               42                 0                             2
`

func TestPlanThresholdSeed003(t *testing.T) {
	code, out, errs := run(t, "plan", "threshold", "--distribution", "1:9,3:5,5:4,never:2", "--thresholds", "1,2,3,5,8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, seed003Table) {
		t.Errorf("table\n%s\nwant\n%s", out, seed003Table)
	}
	if !strings.Contains(out, "recommended: threshold 5 (Lily retry_attempts = 4)") {
		t.Errorf("no recommendation of 5:\n%s", out)
	}

	m := planJSON(t, "threshold", "--distribution", "1:9,3:5,5:4,never:2", "--thresholds", "1,2,3,5,8")
	wantExact(t, m, "recommended_threshold", 5)
	rows, _ := m["thresholds"].([]any)
	want := [][5]float64{{1, 9, 11, 9, 2}, {2, 9, 22, 9, 2}, {3, 14, 28, 4, 2}, {5, 18, 36, 0, 2}, {8, 18, 42, 0, 2}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want 5: %v", len(rows), m)
	}
	keys := []string{"threshold", "processed", "wasted_attempts", "wrongly_isolated", "permanently_failing_isolated"}
	for i, w := range want {
		row := rows[i].(map[string]any)
		for j, k := range keys {
			if row[k] != w[j] {
				t.Errorf("row %d %s = %v, want %v", i+1, k, row[k], w[j])
			}
		}
	}
}

func TestPlanThresholdAttemptsLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "attempts.txt")
	var b strings.Builder
	b.WriteString("# attempts needed, one per message\n")
	for _, v := range []string{"1", "1", "3", "1", "5", "3", "never", "1", "3", "5", "1", "3", "never", "1", "5", "1", "1", "3", "1", "5"} {
		b.WriteString(v + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "plan", "threshold", "--attempts-log", path, "--thresholds", "1,2,3,5,8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, seed003Table) {
		t.Errorf("table from the attempts log\n%s\nwant\n%s", out, seed003Table)
	}
	// Without --thresholds: 1 .. largest need + 1.
	m := planJSON(t, "threshold", "--attempts-log", path)
	if rows := m["thresholds"].([]any); len(rows) != 6 {
		t.Errorf("default sweep has %d rows, want 6 (1..6)", len(rows))
	}
}

// svgPoints parses an SVG file with encoding/xml and returns its data
// points ("series@x,y") and marks ("x,y").
func svgPoints(t *testing.T, path string) (points, marks map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	points, marks = map[string]bool{}, map[string]bool{}
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not valid XML: %v", path, err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = el.Name.Space + " " + el.Name.Local
		}
		if el.Name.Local != "circle" {
			continue
		}
		a := map[string]string{}
		for _, at := range el.Attr {
			a[at.Name.Local] = at.Value
		}
		for _, k := range []string{"cx", "cy", "r"} {
			if _, err := strconv.ParseFloat(a[k], 64); err != nil {
				t.Errorf("circle %v: %s is not a number", a, k)
			}
		}
		switch a["class"] {
		case "point":
			points[a["data-series"]+"@"+a["data-x"]+","+a["data-y"]] = true
		case "mark":
			marks[a["data-x"]+","+a["data-y"]] = true
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
	return points, marks
}

func TestPlanCharts(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args   []string
		points []string
		mark   string
	}{
		{[]string{"outage", "--rate", "2000", "--outage", "600s", "--attempts", "5", "--interval", "60s"},
			[]string{"dead-lettered@0,1200000", "dead-lettered@100,1000000", "dead-lettered@600,0", "dead-lettered@800,0"}, "240,720000"},
		{[]string{"independent", "--rate", "2000", "--failure-prob", "0.01", "--attempts", "3"},
			[]string{"daily volume · p^k@1,1728000", "daily volume · p^k@3,172.8", "daily volume · p^k@5,0.01728"}, "3,172.8"},
		{[]string{"poison", "--rate", "2000", "--poison-fraction", "1e-5", "--crash-after", "2s", "--redelivery", "60s", "--attempts", "5", "--handler-time", "50ms"},
			[]string{"poison, no limit@1,57.6", "poison, limit 5 attempts@1,0.2", "healthy load@1,100"}, "1,57.6"},
		{[]string{"partition", "--delays", "1s,2s,4s,8s,16s", "--handler-time", "50ms", "--partition-rate", "20", "--poison-per-day", "1728", "--partitions", "100"},
			[]string{"blocking retries@5,9.0144", "non-blocking retry topics@5,0.0144"}, "5,9.0144"},
		{[]string{"threshold", "--distribution", "1:9,3:5,5:4,never:2", "--thresholds", "1,2,3,5,8"},
			[]string{"wasted attempts@1,11", "wasted attempts@8,42", "processed@3,14", "wrongly isolated@3,4"}, "5,36"},
	}
	for _, tc := range tests {
		t.Run(tc.args[0], func(t *testing.T) {
			path := filepath.Join(dir, tc.args[0]+".svg")
			code, out, errs := run(t, append(append([]string{"plan"}, tc.args...), "--chart", path)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !strings.Contains(out, "chart written to "+path) {
				t.Errorf("output does not mention the chart:\n%s", out)
			}
			points, marks := svgPoints(t, path)
			for _, p := range tc.points {
				if !points[p] {
					t.Errorf("point %q missing; have %v", p, points)
				}
			}
			if !marks[tc.mark] {
				t.Errorf("mark %q missing; have %v", tc.mark, marks)
			}
		})
	}
	// --json with --chart prints only the JSON.
	path := filepath.Join(dir, "j.svg")
	code, out, _ := run(t, "plan", "independent", "--rate", "1", "--failure-prob", "0.5", "--attempts", "2", "--json", "--chart", path)
	if code != 0 || !json.Valid([]byte(out)) {
		t.Errorf("--json --chart: exit %d, output %q is not only JSON", code, out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("--json --chart wrote no chart: %v", err)
	}
}

func TestPlanBadInputExitsTwoNamingTheFlag(t *testing.T) {
	outage := []string{"plan", "outage", "--rate", "2000", "--outage", "600s"}
	ind := []string{"plan", "independent", "--rate", "2000", "--attempts", "3"}
	poison := []string{"plan", "poison", "--rate", "2000", "--crash-after", "2s", "--redelivery", "60s"}
	part := []string{"plan", "partition", "--handler-time", "50ms", "--partition-rate", "20", "--poison-per-day", "1728"}
	with := func(base []string, extra ...string) []string { return append(append([]string{}, base...), extra...) }
	tests := []struct {
		args []string
		flag string
	}{
		// negative rate
		{[]string{"plan", "outage", "--rate", "-5", "--outage", "600s", "--attempts", "5", "--interval", "60s"}, "--rate"},
		{[]string{"plan", "independent", "--rate=-1", "--failure-prob", "0.1", "--attempts", "3"}, "--rate"},
		{with(poison[:2], "--rate=-0.5", "--poison-fraction", "0.1", "--crash-after", "2s", "--redelivery", "60s"), "--rate"},
		{with(part, "--partition-rate=-20", "--partitions", "100", "--delays", "1s"), "--partition-rate"},
		{[]string{"plan", "outage", "--rate", "NaN", "--outage", "600s", "--attempts", "5", "--interval", "60s"}, "--rate"},
		{[]string{"plan", "outage", "--rate", "lots", "--outage", "600s", "--attempts", "5", "--interval", "60s"}, "--rate"},
		// probability outside 0..1
		{with(ind, "--failure-prob", "1.5"), "--failure-prob"},
		{with(ind, "--failure-prob=-0.01"), "--failure-prob"},
		{with(poison, "--poison-fraction", "2"), "--poison-fraction"},
		// empty distribution
		{[]string{"plan", "threshold", "--distribution", ""}, "--distribution"},
		{[]string{"plan", "threshold", "--distribution", "1:0,never:0"}, "--distribution"},
		{[]string{"plan", "threshold", "--distribution", "1:9,sometimes:2"}, "--distribution"},
		{[]string{"plan", "threshold"}, "--distribution"},
		{[]string{"plan", "threshold", "--distribution", "1:9", "--thresholds", "0"}, "--thresholds"},
		{[]string{"plan", "threshold", "--distribution", "1:9", "--thresholds", "1,x"}, "--thresholds"},
		{[]string{"plan", "threshold", "--attempts-log", "/nonexistent/attempts.txt"}, "--attempts-log"},
		// unknown unit
		{with(outage[:4], "--outage", "10parsecs", "--attempts", "5", "--interval", "60s"), "--outage"},
		{with(outage, "--attempts", "5", "--interval", "60"), "--interval"},
		{with(outage, "--delays", "1s,2q"), "--delays"},
		{with(poison, "--poison-fraction", "1e-5", "--handler-time", "50xs"), "--handler-time"},
		{with(part, "--partitions", "100", "--delays", "1s", "--produce-time", "5 fortnights"), "--produce-time"},
		// negative durations and other ranges
		{with(outage[:4], "--outage=-1m", "--attempts", "5", "--interval", "60s"), "--outage"},
		{with(poison, "--poison-fraction", "1e-5", "--redelivery", "0s"), "--redelivery"},
		{with(outage, "--attempts", "0", "--interval", "60s"), "--attempts"},
		{with(outage, "--attempts", "5", "--backoff-millis", "1000", "--max-backoff-millis", "10"), "--max-backoff-millis"},
		{with(outage, "--attempts", "200", "--backoff-millis", "1000"), "--attempts"},
		{with(outage, "--interval", "60s"), "--attempts"},
		{with(outage, "--delays", "1s,2s", "--attempts", "5"), "--attempts"},
		{with(outage, "--delays", "1s", "--interval", "1s", "--attempts", "2"), "--interval"},
		{outage, "--delays"},
		{with(part, "--partitions", "0", "--delays", "1s"), "--partitions"},
		{with(poison, "--poison-fraction", "1e-5", "--attempts", "0"), "--attempts"},
		// required flags and the chart format
		{[]string{"plan", "outage", "--outage", "600s", "--attempts", "5", "--interval", "60s"}, "--rate"},
		{[]string{"plan", "independent", "--rate", "1", "--failure-prob", "0.1"}, "--attempts"},
		{[]string{"plan", "partition", "--delays", "1s"}, "--handler-time, --partition-rate, --poison-per-day, --partitions"},
		{[]string{"plan", "nonsense"}, "unknown mode"},
		{with(ind, "--failure-prob", "0.1", "--chart", "out.png"), "--chart"},
		// jetstream
		{[]string{"plan", "jetstream", "--max-deliver", "-3"}, "--max-deliver"},
		{[]string{"plan", "jetstream", "--backoff", "1s,0s"}, "--backoff"},
		{[]string{"plan", "jetstream", "--outage", "10m"}, "--outage"},
		{[]string{"plan", "jetstream", "--dlq-discard", "oldest"}, "--dlq-discard"},
		{[]string{"plan", "jetstream", "--dead-letter-rate=-1"}, "--dead-letter-rate"},
	}
	for _, tc := range tests {
		code, out, errs := run(t, tc.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stdout %q, stderr %q)", tc.args, code, out, errs)
			continue
		}
		if !strings.Contains(errs, tc.flag) {
			t.Errorf("%v: stderr %q does not name %s", tc.args, errs, tc.flag)
		}
		if out != "" {
			t.Errorf("%v: printed %q on stdout", tc.args, out)
		}
	}
	if _, err := os.Stat("out.png"); err == nil {
		t.Error("a rejected --chart out.png was written")
	}
}

func TestPlanUnknownUnitMessage(t *testing.T) {
	_, _, errs := run(t, "plan", "outage", "--rate", "1", "--outage", "10parsecs", "--attempts", "2", "--interval", "1s")
	for _, want := range []string{"--outage", `unknown unit "parsecs"`, "600s"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q lacks %q", errs, want)
		}
	}
}
