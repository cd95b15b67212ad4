package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers/livelint"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// lintJSON runs 'lily lint args... --json' and decodes the report.
func lintJSON(t *testing.T, args ...string) (int, lint.Report, string) {
	t.Helper()
	code, out, errOut := run(t, append(append([]string{"lint"}, args...), "--json")...)
	var r lint.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("lint %v: exit %d, decode %q: %v (stderr %q)", args, code, out, err, errOut)
	}
	return code, r, errOut
}

// lintFinding returns the finding with the code about queue, failing the
// test when there is none.
func lintFinding(t *testing.T, r lint.Report, code, queue string) lint.Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Code == code && f.Queue == queue {
			if f.What == "" || f.Why == "" || f.Fix == "" {
				t.Errorf("%s: empty what, why or fix: %+v", code, f)
			}
			return f
		}
	}
	t.Fatalf("no %s finding about %q in %+v", code, queue, r.Findings)
	return lint.Finding{}
}

// lintOwned is a queue that draws no static finding.
const lintOwned = "name = \"orders.created\"\nowner = \"orders\"\nretry_attempts = 3\n"

func TestLintStaticFindings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, severity string
		queue          string // [[queue]] body
		exit, strict   int    // exit codes without and with --strict
		whyHas         string
	}{
		{lint.CodeNoRetries, "warning", "name = \"orders.created\"\nowner = \"orders\"\n", 0, 1, "blip"},
		{lint.CodeDeliveryLimitHigh, "warning", lintOwned + "delivery_limit = 25\n", 0, 1, "25 times"},
		{lint.CodeDeliveryLimitOne, "warning", lintOwned + "delivery_limit = 1\n", 0, 1, "innocent"},
		{lint.CodeRetrySpanShort, "error", lintOwned + "expected_outage = \"10m\"\n", 1, 1, "R × 593"},
		{lint.CodeDLQRetentionBelowSource, "error", lintOwned + "source_retention_hours = 96\ndlq_retention_hours = 72\n", 1, 1, "source"},
		{lint.CodeDLQRetentionBelowTriage, "error", lintOwned + "triage_hours = 48\ndlq_retention_hours = 72\n", 1, 1, "triage"},
		{lint.CodeJitterWithoutRetries, "info", "name = \"orders.created\"\nowner = \"orders\"\nretry_jitter_ratio = 0.1\n", 0, 1, "spread"},
		{lint.CodeBucketsNearLimit, "warning", "name = \"orders.created\"\nowner = \"orders\"\nretry_attempts = 9\n" +
			"retry_jitter_ratio = 0.2\nmax_retry_backoff_millis = 1000000\n", 0, 1, "invalid"},
		{lint.CodeRetriesShareCap, "info", "name = \"orders.created\"\nowner = \"orders\"\nretry_attempts = 10\n", 0, 0, "fixed 60000 ms"},
		{lint.CodeParkNeedsKeys, "info", lintOwned + "ordering = \"park\"\n", 0, 0, "key"},
		{lint.CodeNoOwner, "warning", "name = \"orders.created\"\nretry_attempts = 3\n", 0, 1, "nobody owns"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, "[[queue]]\n"+tc.queue)
			code, r, _ := lintJSON(t, "--config", cfg)
			f := lintFinding(t, r, tc.code, "orders.created")
			if string(f.Severity) != tc.severity || !strings.Contains(f.Why, tc.whyHas) {
				t.Errorf("%+v: want severity %s, why mentioning %q", f, tc.severity, tc.whyHas)
			}
			if code != tc.exit {
				t.Errorf("exit %d, want %d; findings %+v", code, tc.exit, r.Findings)
			}
			if code, _, _ := lintJSON(t, "--config", cfg, "--strict"); code != tc.strict {
				t.Errorf("--strict: exit %d, want %d", code, tc.strict)
			}
		})
	}
}

func TestLintTopologyBucketsNearLimit(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 120 { // 26 buckets each: 3,120 of 4,096
		fmt.Fprintf(&b, "[[queue]]\nname = \"q%03d\"\nowner = \"o\"\nretry_attempts = 9\nretry_jitter_ratio = 0.2\nmax_retry_backoff_millis = 1000000\n", i)
	}
	code, r, _ := lintJSON(t, "--config", writeConfig(t, b.String()))
	f := lintFinding(t, r, lint.CodeTopologyBucketsNearLimit, "")
	if f.Severity != lint.Warning || !strings.Contains(f.What, "3120") || code != 0 {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func TestLintCleanAndText(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "[[queue]]\n"+lintOwned)
	code, out, errOut := run(t, "lint", "--config", cfg, "--strict")
	if code != 0 || out != "0 errors, 0 warnings, 0 infos\n" || errOut != "" {
		t.Errorf("clean config: exit %d %q %q", code, out, errOut)
	}
	code, r, _ := lintJSON(t, "--config", cfg)
	if code != 0 || r.Findings == nil || len(r.Findings) != 0 {
		t.Errorf("clean config JSON: exit %d %+v", code, r)
	}
	two := writeConfig(t, "[[queue]]\nname = \"a.b\"\nowner = \"x\"\nretry_attempts = 1\nexpected_outage = \"1h\"\n"+
		"[[queue]]\nname = \"c.d\"\nretry_attempts = 1\n")
	code, out, errOut = run(t, "lint", "--config", two)
	for _, want := range []string{"queue a.b\n  error   retry-span-short: ", "\n          why: ", "\n          fix: ",
		"\n\nqueue c.d\n  warning no-owner: ", "1 error, 1 warning, 0 infos\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 || !strings.Contains(errOut, "lint: 1 error") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestLintBadInput(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "[[queue]]\n"+lintOwned)
	for _, args := range [][]string{
		{"lint"},
		{"lint", "--config"},
		{"lint", "--config", cfg, "--bogus"},
		{"lint", "--config", cfg, "extra"},
		{"lint", "--config", cfg, "--url", "amqp://x"},
		{"lint", "--config", cfg, "--management-url", "http://x"},
		{"lint", "--config", cfg, "--live", "--url", "http://not-amqp"},
	} {
		if code, _, errOut := run(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d %q, want 2 with a message", args, code, errOut)
		}
	}
	for body, field := range map[string]string{
		"[[queue]]\nname = \"a.b\"\nexpected_outage = \"10 minutes\"\n": "expected_outage",
		"[[queue]]\nname = \"a.b\"\nexpected_outage = \"-5m\"\n":        "expected_outage",
		"[[queue]]\nname = \"a.b\"\ntriage_hours = -1\n":                "triage_hours",
		"[[queue]]\nname = \"a.b\"\nsource_retention_hours = -1\n":      "source_retention_hours",
		"[[queue]]\nname = \"a.b\"\ndelivery_limit = 0\n":               "delivery_limit = 0: must be in 1..1000",
		"[[queue]]\nname = \"a.b\"\nretry_attempts = \"3\"\n":           `queue "a.b": retry_attempts: want an integer, got the string "3" (line 3)`,
	} {
		// An invalid configuration is bad input (2), not a finding (1).
		if code, _, errOut := run(t, "lint", "--config", writeConfig(t, body)); code != 2 || !strings.Contains(errOut, field) {
			t.Errorf("%q: exit %d %q, want 2 naming %s", body, code, errOut, field)
		}
	}
	// --live without RabbitMQ queues runs the static checks and says so.
	code, _, errOut := lintJSON(t, "--config", cfg, "--live")
	if code != 0 || !strings.Contains(errOut, "no [[queue]] has transport") {
		t.Errorf("--live on sqlite queues: exit %d %q", code, errOut)
	}
}

// TestLintNoQueues: 'lily lint' of an empty file, or of one without any
// [[queue]], says so and exits 1 (it used to report a clean configuration).
func TestLintNoQueues(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "db = \"lily.db\"\n"} {
		code, r, _ := lintJSON(t, "--config", writeConfig(t, body))
		if code != 1 || r.Errors != 1 || !r.Has(lint.CodeNoQueues, "") {
			t.Errorf("%q: exit %d, report %+v, want exit 1 with %s", body, code, r, lint.CodeNoQueues)
		}
	}
	code, out, _ := run(t, "lint", "--config", writeConfig(t, ""))
	if code != 1 || !strings.Contains(out, "no [[queue]] entry") {
		t.Errorf("text: exit %d %q", code, out)
	}
}

func TestLintExpectedOutageField(t *testing.T) {
	t.Parallel()
	c, err := config.ParseConfig([]byte("[[queue]]\nname = \"a.b\"\nexpected_outage = \"1h30m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Queues[0].ExpectedOutageDuration(); d.Minutes() != 90 {
		t.Errorf("ExpectedOutageDuration = %v", d)
	}
	if d := (lily.QueueConfig{}).ExpectedOutageDuration(); d != 0 {
		t.Errorf("unset: %v", d)
	}
}

// lintLiveQueue sets up a RabbitMQ queue "<prefix>.created" for a live lint
// test: it returns the broker URL, the queue, and a configuration file
// with body added to the queue, and deletes everything the plan names
// (and extra) when the test ends.
func lintLiveQueue(t *testing.T, body string) (url, queue, cfg string) {
	t.Helper()
	url = needRabbit(t)
	ex := fmt.Sprintf("lint%08x", rand.Uint32())
	queue = ex + ".created"
	cfg = writeConfig(t, fmt.Sprintf("rabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\nowner = \"orders\"\nretry_attempts = 1\n%s",
		url, queue, body))
	top := lintPlan(t, cfg)
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		for _, q := range top.Queues {
			if ch, err := conn.Channel(); err == nil {
				ch.QueueDelete(q.Name, false, false, false)
				ch.Close()
			}
		}
		for _, e := range top.Exchanges {
			if ch, err := conn.Channel(); err == nil {
				ch.ExchangeDelete(e.Name, false, false)
				ch.Close()
			}
		}
	})
	return url, queue, cfg
}

// lintLiveQueueManaged is lintLiveQueue for a test of what only the
// management API reads: skipped loudly without it, failed under CI=true
// (rabbittest.WithManagement).
func lintLiveQueueManaged(t *testing.T, body string) (url, queue, cfg string) {
	t.Helper()
	rabbittest.WithManagement(t)
	return lintLiveQueue(t, body)
}

// lintPlan returns the planned topology of a configuration file.
func lintPlan(t *testing.T, cfg string) rabbitmq.Topology {
	t.Helper()
	c, err := config.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	top, err := rabbitmq.Plan(livelint.RabbitMQSpecs(c))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// lintDeclare declares the planned topology of cfg the way someone else
// might have: mutate may change each queue's arguments first (a nil value
// deletes the argument).
func lintDeclare(t *testing.T, url, cfg string, mutate func(q rabbitmq.Queue, args map[string]any)) {
	t.Helper()
	top := lintPlan(t, cfg)
	lintBroker(t, url, func(ch *amqp.Channel) error {
		for _, e := range top.Exchanges {
			if err := ch.ExchangeDeclare(e.Name, e.Type, e.Durable, false, false, false, nil); err != nil {
				return err
			}
		}
		for _, q := range top.Queues {
			args := maps.Clone(q.Arguments)
			if mutate != nil {
				mutate(q, args)
			}
			maps.DeleteFunc(args, func(_ string, v any) bool { return v == nil })
			if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table(args)); err != nil {
				return fmt.Errorf("declare %s %v: %w", q.Name, args, err)
			}
		}
		for _, b := range top.Bindings {
			if err := ch.QueueBind(b.Queue, b.RoutingKey, b.Exchange, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// lintBroker runs fn on a fresh channel to the broker.
func lintBroker(t *testing.T, url string, fn func(ch *amqp.Channel) error) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(ch); err != nil {
		t.Fatal(err)
	}
}

// lintNoDrift fails the test when r has topology-drift findings: the
// specific finding under test must explain the difference alone.
func lintNoDrift(t *testing.T, r lint.Report) {
	t.Helper()
	for _, f := range r.Findings {
		if f.Code == lint.CodeTopologyDrift {
			t.Errorf("drift reported besides the specific finding: %s", f.What)
		}
	}
}

func TestLintLiveClean(t *testing.T) {
	t.Parallel()
	_, _, cfg := lintLiveQueueManaged(t, "")
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply: exit %d %s %s", code, out, errOut)
	}
	code, r, errOut := lintJSON(t, "--config", cfg, "--live", "--strict")
	if code != 0 || len(r.Findings) != 0 {
		t.Errorf("the applied topology: exit %d %q %+v", code, errOut, r.Findings)
	}
}

func TestLintLiveTopologyDrift(t *testing.T) {
	t.Parallel()
	_, queue, cfg := lintLiveQueueManaged(t, "")
	code, r, _ := lintJSON(t, "--config", cfg, "--live")
	f := lintFinding(t, r, lint.CodeTopologyDrift, queue)
	if code != 1 || f.Severity != lint.Error || !strings.Contains(f.What, "missing") {
		t.Errorf("nothing declared: exit %d, %+v", code, f)
	}
	// An argument Lily does not set is a warning.
	_, queue, cfg = lintLiveQueueManaged(t, "")
	url := needRabbit(t)
	lintDeclare(t, url, cfg, func(q rabbitmq.Queue, args map[string]any) {
		if q.Role == "main" {
			args["x-max-length-bytes"] = int64(1 << 30)
		}
	})
	code, r, _ = lintJSON(t, "--config", cfg, "--live")
	f = lintFinding(t, r, lint.CodeTopologyDrift, queue)
	if code != 0 || f.Severity != lint.Warning || !strings.Contains(f.What, "unexpected x-max-length-bytes") {
		t.Errorf("unexpected argument: exit %d, %+v", code, f)
	}
	if code, _, _ := lintJSON(t, "--config", cfg, "--live", "--strict"); code != 1 {
		t.Errorf("--strict: exit %d, want 1", code)
	}
}

func TestLintLiveDLXMissing(t *testing.T) {
	t.Parallel()
	url, queue, cfg := lintLiveQueueManaged(t, "")
	lintDeclare(t, url, cfg, nil)
	dlx := rabbitmq.DeadLetterExchange(strings.TrimSuffix(queue, ".created"))
	lintBroker(t, url, func(ch *amqp.Channel) error { return ch.ExchangeDelete(dlx, false, false) })
	code, r, _ := lintJSON(t, "--config", cfg, "--live")
	f := lintFinding(t, r, lint.CodeDLXMissing, queue)
	if code != 1 || f.Severity != lint.Error || !strings.Contains(f.What, dlx) || !strings.Contains(f.Why, "silently") {
		t.Errorf("exit %d, %+v", code, f)
	}
	lintNoDrift(t, r)
}

func TestLintLiveDLXUnbound(t *testing.T) {
	t.Parallel()
	url, queue, cfg := lintLiveQueueManaged(t, "")
	lintDeclare(t, url, cfg, nil)
	dlx := rabbitmq.DeadLetterExchange(strings.TrimSuffix(queue, ".created"))
	lintBroker(t, url, func(ch *amqp.Channel) error {
		return ch.QueueUnbind(rabbitmq.DeadLetterQueue(queue), queue, dlx, nil)
	})
	code, r, _ := lintJSON(t, "--config", cfg, "--live")
	f := lintFinding(t, r, lint.CodeDLXUnbound, queue)
	if code != 1 || !strings.Contains(f.What, fmt.Sprintf("routing key %q", queue)) {
		t.Errorf("exit %d, %+v", code, f)
	}
	lintNoDrift(t, r)
}

// lintLiveArgs declares the planned topology of a fresh queue with args
// set on the queues of role (a nil value deletes the argument), runs
// 'lily lint --live' and returns its exit code and the finding of code for
// the queue; it fails the test when drift is reported besides.
func lintLiveArgs(t *testing.T, role string, args map[string]any, code string) (int, lint.Finding, string) {
	t.Helper()
	url, queue, cfg := lintLiveQueueManaged(t, "")
	lintDeclare(t, url, cfg, func(q rabbitmq.Queue, qargs map[string]any) {
		if q.Role == role {
			maps.Copy(qargs, args)
		}
	})
	exit, r, _ := lintJSON(t, "--config", cfg, "--live")
	f := lintFinding(t, r, code, queue)
	lintNoDrift(t, r)
	return exit, f, queue
}

func TestLintLiveAtLeastOnceWithoutRejectPublish(t *testing.T) {
	t.Parallel()
	code, f, _ := lintLiveArgs(t, "main", map[string]any{"x-overflow": nil}, // the default, drop-head
		lint.CodeAtLeastOnceWithoutRejectPublish)
	if code != 1 || !strings.Contains(f.What, "drop-head") || !strings.Contains(f.Why, "at-most-once") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func TestLintLiveDeliveryLimitWithoutDLX(t *testing.T) {
	t.Parallel()
	code, f, _ := lintLiveArgs(t, "main", map[string]any{"x-dead-letter-exchange": nil, "x-dead-letter-routing-key": nil},
		lint.CodeDeliveryLimitWithoutDLX)
	if code != 1 || !strings.Contains(f.What, "x-delivery-limit 4") || !strings.Contains(f.Why, "dropped") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func TestLintLiveNoDeliveryLimit(t *testing.T) {
	t.Parallel()
	code, f, _ := lintLiveArgs(t, "main", map[string]any{"x-delivery-limit": nil}, lint.CodeNoDeliveryLimit)
	if code != 1 || f.Severity != lint.Error || !strings.Contains(f.Fix, "x-delivery-limit = 4") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func TestLintLiveDLQMessageTTL(t *testing.T) {
	t.Parallel()
	code, f, _ := lintLiveArgs(t, "dlq", map[string]any{"x-message-ttl": int64(14 * 24 * 3600 * 1000)}, lint.CodeDLQMessageTTL)
	if code != 1 || !strings.Contains(f.What, "1209600000 ms (argument)") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func TestLintLiveTTLWithoutDLX(t *testing.T) {
	t.Parallel()
	code, f, queue := lintLiveArgs(t, "retry", map[string]any{"x-dead-letter-exchange": nil, "x-dead-letter-routing-key": nil},
		lint.CodeTTLWithoutDLX)
	if code != 1 || !strings.Contains(f.What, rabbitmq.BucketQueue(queue, 1000)) || !strings.Contains(f.Why, "dropped") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

func TestLintLiveDLQMessageTTLFromPolicy(t *testing.T) {
	t.Parallel()
	amqpURL, queue, cfg := lintLiveQueueManaged(t, "")
	lintDeclare(t, amqpURL, cfg, nil)
	m, err := rabbitmq.ManagementFor(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	dlq := rabbitmq.DeadLetterQueue(queue)
	policy := m.URL + "/api/policies/%2F/" + url.PathEscape(queue+"-expire")
	lintHTTP(t, m, http.MethodPut, policy,
		fmt.Sprintf(`{"pattern":"^%s$","definition":{"message-ttl":60000},"apply-to":"queues","priority":100}`, strings.ReplaceAll(dlq, ".", `\\.`)))
	t.Cleanup(func() { lintHTTP(t, m, http.MethodDelete, policy, "") })
	// The management API shows a queue's effective policy with its
	// statistics, refreshed every 5 s by default.
	var r lint.Report
	var code int
	// Every: each look runs a live lint against the management API.
	waittest.Poller{Every: 250 * time.Millisecond}.For(t, "live lint to see the policy's message TTL", func() (bool, string) {
		code, r, _ = lintJSON(t, "--config", cfg, "--live")
		return r.Has(lint.CodeDLQMessageTTL, queue), fmt.Sprintf("exit %d, %+v", code, r)
	})
	if code != 1 {
		t.Errorf("exit %d", code)
	}
	f := lintFinding(t, r, lint.CodeDLQMessageTTL, queue)
	if !strings.Contains(f.What, fmt.Sprintf("60000 ms (policy %q)", queue+"-expire")) || !strings.Contains(f.Fix, "policy") {
		t.Errorf("%+v", f)
	}
	lintNoDrift(t, r) // a policy is no argument: verify sees nothing
}

func TestLintLiveDeliveryCountSemantics(t *testing.T) {
	t.Parallel()
	amqpURL, queue, cfg := lintLiveQueueManaged(t, "")
	lintDeclare(t, amqpURL, cfg, nil)
	m, err := rabbitmq.ManagementFor(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	// The real broker, reporting itself as RabbitMQ 4.3.
	target, _ := url.Parse(m.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path == "/api/overview" {
			resp.Body = io.NopCloser(strings.NewReader(`{"rabbitmq_version":"4.3.0"}`))
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
			resp.Header.Del("Content-Encoding")
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	code, r, _ := lintJSON(t, "--config", cfg, "--live", "--management-url", srv.URL)
	f := lintFinding(t, r, lint.CodeDeliveryCountSemantics, "")
	if f.Severity != lint.Warning || !strings.Contains(f.What, "4.3.0") {
		t.Errorf("%+v", f)
	}
	// From 4.0 the dead-letter queue, which has no dead-letter exchange,
	// drops a dead letter at the default delivery limit of 20.
	f = lintFinding(t, r, lint.CodeDeliveryLimitWithoutDLX, queue)
	if code != 1 || !strings.Contains(f.What, rabbitmq.DeadLetterQueue(queue)) || !strings.Contains(f.What, "default delivery limit of 20") {
		t.Errorf("exit %d, %+v", code, f)
	}
}

// TestLintLiveManagementUnreachable: with the management API unreachable
// (the plugin off) and a sound topology, the live lint still reads the
// queue's type through AMQP (no queue-not-quorum) and exits 1 on one
// live-checks-not-run error naming the API and the plugin: it never
// passes on checks it could not run.
func TestLintLiveManagementUnreachable(t *testing.T) {
	t.Parallel()
	amqpURL, queue, cfg := lintLiveQueue(t, "")
	lintDeclare(t, amqpURL, cfg, nil)
	code, r, _ := lintJSON(t, "--config", cfg, "--live", "--management-url", "http://127.0.0.1:1")
	f := lintFinding(t, r, lint.CodeLiveChecksNotRun, "")
	if code != 1 || f.Severity != lint.Error || !strings.Contains(f.What, "management API") || !strings.Contains(f.What, lint.CodeDLXUnbound) ||
		!strings.Contains(f.Fix, "rabbitmq-plugins enable rabbitmq_management") {
		t.Errorf("exit %d, %+v: want 1 and an error naming the management API, the checks not run and the plugin", code, f)
	}
	if r.Has(lint.CodeNotQuorum, queue) || r.Errors != 1 {
		t.Errorf("report %+v: want the quorum queue %s unreported and one error", r, queue)
	}
}

// lintHTTP sends a management API request, failing the test unless it
// succeeds.
func lintHTTP(t *testing.T, m *rabbitmq.Management, method, url, body string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(m.User, m.Password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("%s %s: %s %s", method, url, resp.Status, b)
	}
}
