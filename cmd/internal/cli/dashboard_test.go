package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// dashboard is the part of the Grafana dashboard the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestDashboardCommand(t *testing.T) {
	code, out, stderr := run(t, "dashboard")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var d dashboard
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("lily dashboard prints no JSON: %v", err)
	}
	if d.UID != "lily-dead-letters" || len(d.Panels) < 10 {
		t.Errorf("dashboard uid %q with %d panels, want lily-dead-letters with the panels of issue 34", d.UID, len(d.Panels))
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice: Grafana keeps one of them", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	path := filepath.Join(t.TempDir(), "lily.json")
	if code, out, stderr := run(t, "dashboard", "--out", path); code != 0 || !strings.Contains(out, "wrote the Grafana dashboard to "+path) {
		t.Fatalf("--out: exit %d %s %s", code, out, stderr)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != string(dashboardJSON) {
		t.Errorf("--out file differs from the embedded dashboard (%v)", err)
	}
}

// needPrometheus returns the path of the Prometheus server. Under CI=true
// it must be there (.ci/run installs Debian's prometheus package);
// elsewhere the test skips loudly.
func needPrometheus(t *testing.T) string {
	t.Helper()
	return needPrometheusBin(t, "prometheus", "to run the dashboard's queries", "the dashboard's queries are NOT run")
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promServer is a Prometheus server the test started.
type promServer struct{ base string }

// startPrometheus runs the Prometheus server on a free loopback port,
// scraping targets (host:port, /metrics) and evaluating the rule files
// rules every second into a temporary storage directory, until the test
// ends.
func startPrometheus(t *testing.T, bin string, targets map[string]string, rules ...string) promServer {
	t.Helper()
	return startPrometheusAlerting(t, bin, targets, "", rules...)
}

// startPrometheusAlerting is startPrometheus sending its alerts to the
// Alertmanager at host:port am (none when empty).
func startPrometheusAlerting(t *testing.T, bin string, targets map[string]string, am string, rules ...string) promServer {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	// A scrape of 'lily serve' takes 20-40 ms here, but over 1 s when the
	// whole suite runs under -race on two cores (a landing CI saw every
	// target down for 30 s at a 1 s timeout): 2 s is the shortest
	// interval (a timeout may not exceed it) with that headroom.
	cfg.WriteString("global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 1s\n")
	if len(rules) > 0 {
		cfg.WriteString("rule_files:\n")
		for _, r := range rules {
			fmt.Fprintf(&cfg, "  - %q\n", r)
		}
	}
	if am != "" {
		fmt.Fprintf(&cfg, "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [%q]\n", am)
	}
	cfg.WriteString("scrape_configs:\n")
	for _, job := range slices.Sorted(func(yield func(string) bool) {
		for j := range targets {
			if !yield(j) {
				return
			}
		}
	}) {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", job, targets[job])
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	base := startDaemon(t, "prometheus", bin, func(addr string) []string {
		return []string{"--config.file=" + cfgPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr, "--log.level=warn"}
	})
	p := promServer{base: base}
	t.Cleanup(func() { // before the server stops (cleanups run last first)
		if t.Failed() {
			t.Logf("prometheus targets: %s", p.targetHealth())
		}
	})
	return p
}

// targetHealth describes every scrape target's last scrape (health, error,
// duration): what a rule that never fired had to evaluate.
func (p promServer) targetHealth() string {
	var data struct {
		ActiveTargets []struct {
			ScrapePool         string  `json:"scrapePool"`
			Health             string  `json:"health"`
			LastError          string  `json:"lastError"`
			LastScrape         string  `json:"lastScrape"`
			LastScrapeDuration float64 `json:"lastScrapeDuration"`
		} `json:"activeTargets"`
	}
	if err := p.get("/api/v1/targets", url.Values{}, &data); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, tg := range data.ActiveTargets {
		fmt.Fprintf(&b, "\n  %s: %s, last scrape %s took %.3fs, error %q", tg.ScrapePool, tg.Health, tg.LastScrape, tg.LastScrapeDuration, tg.LastError)
	}
	return b.String()
}

// startDaemon runs a server of Debian's prometheus packages (Prometheus,
// Alertmanager) on a free loopback port — args gives its flags for the
// listen address — until the test ends, and returns its base URL once it
// answers /-/ready.
func startDaemon(t *testing.T, name, bin string, args func(addr string) []string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	var logs transporttest.SyncBuffer
	cmd := exec.Command(bin, args(addr)...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		<-exited
		if t.Failed() {
			t.Logf("%s log:\n%s", name, logs.String())
		}
	})
	base := "http://" + addr
	waittest.ForState(t, name+" to answer /-/ready", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited before it was ready: %v\n%s", name, err, logs.String())
		default:
		}
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return base
}

// get reads one answer of Prometheus's HTTP API into data.
func (p promServer) get(path string, q url.Values, data any) error {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, q.Encode(), body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// promSample is one series of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query; a scalar answer is one sample.
func (p promServer) query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want a vector (a panel draws series)", expr, data.ResultType)
	}
	var out []promSample
	return out, json.Unmarshal(data.Result, &out)
}

// value is the sample's value as a float.
func (s promSample) value() float64 {
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// sum adds the values of expr's samples (0 when none).
func (p promServer) sum(expr string) (float64, string) {
	r, err := p.query(expr)
	if err != nil {
		return 0, err.Error()
	}
	var s float64
	for _, x := range r {
		s += x.value()
	}
	return s, fmt.Sprintf("%s = %v", expr, r)
}

// metricName finds the metric names of a PromQL expression.
var metricName = regexp.MustCompile(`\blily_[a-z_]+\b`)

// TestDashboardPanelsQueryPrometheus runs every panel's query of the
// dashboard against a real Prometheus server that scrapes 'lily serve'
// and 'lily consume --metrics' while the consumer works through the
// demo's workload on SQLite: each query must return data and name only
// metrics Prometheus has.
func TestDashboardPanelsQueryPrometheus(t *testing.T) {
	bin := needPrometheus(t)
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	queue := fmt.Sprintf("dash%08x.created", rand.Uint32())
	cfg := sidecarConfig(t, lily.TransportSQLite, "", "", db, queue)
	pub := openSidecarQueue(t, lily.TransportSQLite, "", db, demo.QueueConfig(queue, lily.TransportSQLite, ""))
	msgs, classes := consumeWorkload()
	serveBase := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0")
	metricsAddr := startConsume(t, "--config", cfg, "--queue", queue, "--concurrency", "4",
		"--http", demoHTTPHandler(t).URL, "--metrics", "127.0.0.1:0")
	prom := startPrometheus(t, bin, map[string]string{
		"lily-serve":   strings.TrimPrefix(serveBase, "http://"),
		"lily-consume": metricsAddr,
	})

	// Both targets scraped, and every message of the workload acked or
	// dead-lettered in the consumer's counters as Prometheus has them.
	waittest.ForState(t, "prometheus to scrape lily serve and lily consume", func() (bool, string) {
		var data struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := prom.get("/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
			return false, err.Error()
		}
		up := 0
		for _, tg := range data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
		}
		return up == 2, fmt.Sprintf("%+v", data.ActiveTargets)
	})
	sel := fmt.Sprintf(`{queue=%q}`, queue)
	// The workload is published once Prometheus has the consumer's
	// counters at zero, so that every rate() window holds a sample from
	// before and one from after it.
	waittest.ForState(t, "prometheus to have the consumer's counters at zero", func() (bool, string) {
		r, err := prom.query(`lily_messages_total` + sel)
		return err == nil && len(r) > 0, fmt.Sprintf("%v %v", r, err)
	})
	if err := lily.Publish(ctx, pub, queue, msgs); err != nil {
		t.Fatal(err)
	}
	waittest.ForState(t, "prometheus to see the whole workload settled", func() (bool, string) {
		n, state := prom.sum(`sum(lily_messages_total` + strings.TrimSuffix(sel, "}") + `, outcome=~"acked|dead_lettered"})`)
		return n == float64(len(msgs)), state
	})
	// The catalog's gauges count the dead letters too (a rate needs two
	// scrapes of the counters above; this waits one more scrape of serve).
	waittest.ForState(t, "prometheus to see the dead letters in the catalog", func() (bool, string) {
		n, state := prom.sum(`sum(lily_dlq_entries` + strings.TrimSuffix(sel, "}") + `, state="pending"})`)
		return n == 7, state
	})

	var d dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := prom.get("/api/v1/label/__name__/values", url.Values{}, &names); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$queue", queue, "$__rate_interval", "1m", "$__range", "1h")
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !slices.Contains(names, m) {
					t.Errorf("panel %q (%s) names %s, a metric Prometheus does not have from lily serve and lily consume", p.Title, tg.RefID, m)
				}
			}
			expr := vars.Replace(tg.Expr)
			r, err := prom.query(expr)
			switch {
			case err != nil:
				t.Errorf("panel %q (%s): %v", p.Title, tg.RefID, err)
			case len(r) == 0:
				t.Errorf("panel %q (%s) returns no data: %s", p.Title, tg.RefID, expr)
			case !slices.ContainsFunc(r, func(s promSample) bool { return !math.IsNaN(s.value()) }):
				t.Errorf("panel %q (%s) returns only NaN (nothing to draw): %s = %v", p.Title, tg.RefID, expr, r)
			}
		}
	}
	if queries < 15 {
		t.Errorf("ran %d panel queries, want every query of the dashboard (at least 15)", queries)
	}
	// The $queue variable lists the test's queue.
	for _, v := range d.Templating.List {
		if v.Name != "queue" {
			continue
		}
		m := regexp.MustCompile(`^label_values\((\w+), queue\)$`).FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("$queue is %q, want label_values(METRIC, queue)", v.Definition)
		}
		var qs []string
		if err := prom.get("/api/v1/label/queue/values", url.Values{"match[]": {m[1]}}, &qs); err != nil || !slices.Contains(qs, queue) {
			t.Errorf("$queue (%s) lists %v (%v), want %s", v.Definition, qs, err, queue)
		}
	}
	// Retries at success: the 5 flaky orders succeed after 1 or 2 retries.
	if n, state := prom.sum(`sum(lily_retries_at_ack_sum` + sel + `)`); n < 5 {
		t.Errorf("lily_retries_at_ack counts %v retries at success, want at least one per flaky order: %s", n, state)
	}
	checkDashboardConservation(t, db, cfg, queue, msgs, classes)
}

// startConsume runs 'lily consume args...' (with --metrics) until the
// test ends and returns the address its metrics are served on.
func startConsume(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb transporttest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, append([]string{"consume"}, args...), &out, &errb) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("consume exited %d: %s", code, errb.String())
		}
	})
	re := regexp.MustCompile(`metrics on http://(\S+)/metrics`)
	var m []string
	waittest.ForState(t, "consume to print its metrics address", func() (bool, string) {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("consume exited %d before serving its metrics: %s%s", code, out.String(), errb.String())
		default:
		}
		m = re.FindStringSubmatch(errb.String())
		return m != nil, errb.String()
	})
	return m[1]
}

// checkDashboardConservation checks that every message of the workload
// was acked or dead-lettered, as its class says, and that the ledger
// balances: the dead-lettered event IDs are exactly the malformed,
// hopeless and crashing orders.
func checkDashboardConservation(t *testing.T, db, cfg, queue string, msgs []lily.Message, classes []string) {
	t.Helper()
	want := map[string]bool{}
	for i, m := range msgs {
		if classes[i] == "malformed" || classes[i] == "hopeless" || classes[i] == "crashing" {
			want[m.EventID] = true
		}
	}
	cat, err := catalog.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	entries, err := cat.List(context.Background(), catalog.Filter{Queue: queue}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.EventID] = true
	}
	for id := range want {
		if !got[id] {
			t.Errorf("event %s should be dead-lettered and is not in the catalog", id)
		}
	}
	for id := range got {
		if !want[id] {
			t.Errorf("event %s is in the catalog and should have been acked", id)
		}
	}
	code, out, errOut := run(t, "reconcile", "--config", cfg, "--json")
	var rec reconcileJSON
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || !rec.Balanced || len(rec.Queues) != 1 {
		t.Fatalf("reconcile: exit %d %s %s", code, out, errOut)
	}
	if r := rec.Queues[0]; r.Accepted != int64(len(msgs)) || r.Acked != int64(len(msgs)-len(want)) || r.DeadLettered != int64(len(want)) {
		t.Errorf("ledger %+v, want %d accepted, %d acked, %d dead-lettered", r, len(msgs), len(msgs)-len(want), len(want))
	}
}
