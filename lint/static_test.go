package lint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lily-mq/lily/config"
)

// parse returns the configuration of toml, failing the test if invalid.
func parse(t *testing.T, toml string) config.Config {
	t.Helper()
	c, err := config.ParseConfig([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// codes returns the codes of fs, with their severities: "error retry-span-short".
func codes(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Severity)+" "+f.Code)
	}
	return out
}

// clean is a queue that draws no static finding.
const clean = `
[[queue]]
name = "orders.created"
owner = "orders"
retry_attempts = 3
`

func TestStaticCleanQueueHasNoFindings(t *testing.T) {
	if fs := Static(parse(t, clean)); len(fs) != 0 {
		t.Errorf("findings on a clean queue: %v", codes(fs))
	}
}

func TestStaticRules(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        string // "severity code,..." in Static's order; "" for none
	}{
		{"no retries", "retry_attempts = 0", "warning no-retries"},
		{"delivery limit 21", "delivery_limit = 21", "warning delivery-limit-high"},
		{"delivery limit 20 is fine", "delivery_limit = 20", ""},
		{"delivery limit 1", "delivery_limit = 1", "warning delivery-limit-one"},
		{"delivery limit 2 is fine", "delivery_limit = 2", ""},
		{"outage longer than span", `expected_outage = "8s"`, "error retry-span-short"},
		{"outage equal to span", `expected_outage = "7s"`, ""},
		{"outage zero", `expected_outage = "0s"`, ""},
		{"retention below source", "source_retention_hours = 400", "error dlq-retention-below-source"},
		{"retention equal to source", "source_retention_hours = 336", "error dlq-retention-below-source"},
		{"retention longer than source", "source_retention_hours = 335", ""},
		// SQLite's lease is extended while the handler runs: no lease to outlive.
		{"handler timeout past the sqlite lease is extended", "handler_timeout_millis = 120000", ""},
		{"handler timeout at rabbitmq consumer_timeout", "transport = \"rabbitmq\"\nhandler_timeout_millis = 1800000", "warning handler-timeout-over-lease"},
		{"handler timeout long on rabbitmq is fine", "transport = \"rabbitmq\"\nhandler_timeout_millis = 600000", ""},
		{"handler timeout long on kafka has no lease", "transport = \"kafka\"\nhandler_timeout_millis = 1800000", ""},
		{"breaker without retries", "retry_attempts = 0\nbreaker = true", "warning no-retries,warning breaker-without-retries"},
		{"breaker off without retries", "retry_attempts = 0\nbreaker = false", "warning no-retries"},
		{"buckets too small for the outage", "transport = \"rabbitmq\"\nexpected_outage = \"10m\"\nexpected_rate_per_second = 100\nbucket_max_length = 19999",
			"error retry-span-short,error retry-capacity-short"},
		{"buckets hold the outage", "transport = \"rabbitmq\"\nexpected_outage = \"10m\"\nexpected_rate_per_second = 100\nbucket_max_length = 20000",
			"error retry-span-short"},
		{"retention below twice triage", "triage_hours = 169", "error dlq-retention-below-triage"},
		{"retention twice triage", "triage_hours = 168", ""},
		{"jitter without retries", "retry_attempts = 0\nretry_jitter_ratio = 0.2", "warning no-retries,info jitter-without-retries"},
		{"buckets near limit", "retry_attempts = 9\nretry_jitter_ratio = 0.2\nmax_retry_backoff_millis = 1000000", "warning buckets-near-limit"},
		{"19 buckets are fine", "retry_attempts = 8\nretry_jitter_ratio = 0.2", "info retries-share-cap"},
		{"retries share cap", "retry_attempts = 9", "info retries-share-cap"},
		{"one retry at cap", "retry_attempts = 7", ""},
		{"park", `ordering = "park"`, "info park-needs-keys"},
		{"block", `ordering = "block"`, ""},
		{"block on kafka", "ordering = \"block\"\ntransport = \"kafka\"", "info block-holds-partition"},
		{"block on nats", "ordering = \"block\"\ntransport = \"nats\"", "info nats-ordered-one-in-flight"},
		{"park on nats", "ordering = \"park\"\ntransport = \"nats\"", "info park-needs-keys,info nats-ordered-one-in-flight"},
		{"no owner", `owner = " "`, "warning no-owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toml := strings.Replace(clean, "retry_attempts = 3", "retry_attempts = 3\n"+tc.extra, 1)
			if strings.Contains(tc.extra, "retry_attempts") {
				toml = strings.Replace(clean, "retry_attempts = 3", tc.extra, 1)
			}
			if strings.HasPrefix(tc.extra, "owner") {
				toml = strings.Replace(clean, `owner = "orders"`, tc.extra, 1)
			}
			got := codes(Static(parse(t, toml)))
			if tc.want == "" {
				if len(got) != 0 {
					t.Errorf("findings %v, want none", got)
				}
				return
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("findings %v, want exactly %q", got, tc.want)
			}
		})
	}
}

// TestStaticNoQueues: an empty file, or one without [[queue]], is an error
// finding (it used to pass with no finding at all).
func TestStaticNoQueues(t *testing.T) {
	for _, doc := range []string{"", "# nothing yet\n", "db = \"lily.db\"\n[[token]]\nname = \"ci\"\nrole = \"viewer\"\nsecret = \"0123456789abcdef\"\n"} {
		fs := Static(parse(t, doc))
		if got := codes(fs); strings.Join(got, ",") != "error no-queues" {
			t.Errorf("%q: findings %v, want error no-queues", doc, got)
			continue
		}
		if !strings.Contains(fs[0].What, "no [[queue]]") || fs[0].Fix == "" {
			t.Errorf("finding %+v", fs[0])
		}
	}
}

// TestRetryCapacityShortNumbers: the finding gives the capacity, the
// demand and the bucket_max_length that holds it.
func TestRetryCapacityShortNumbers(t *testing.T) {
	fs := Static(parse(t, `
[[queue]]
name = "orders.created"
owner = "orders"
transport = "rabbitmq"
retry_attempts = 3
expected_outage = "5s"
expected_rate_per_second = 100
bucket_max_length = 100
`))
	if len(fs) != 1 || fs[0].Code != CodeRetryCapacityShort {
		t.Fatalf("findings %v", codes(fs))
	}
	for _, want := range []string{"3 retry buckets", "bucket_max_length = 100", "300", "500"} {
		if !strings.Contains(fs[0].What, want) {
			t.Errorf("what %q lacks %q", fs[0].What, want)
		}
	}
	if !strings.Contains(fs[0].Fix, "bucket_max_length to at least 167") {
		t.Errorf("fix %q", fs[0].Fix)
	}
}

func TestRetrySpanShortQuotesThePlanner(t *testing.T) {
	// Seed 000: five attempts, delays 30, 60, 120, 240 s span 450 s; a
	// 600 s outage dead-letters 150 s of arrivals (300,000 at 2,000/s).
	c := parse(t, `
[[queue]]
name = "payments.ledger"
owner = "payments"
retry_attempts = 4
retry_backoff_millis = 30000
max_retry_backoff_millis = 240000
expected_outage = "10m"
`)
	fs := Static(c)
	if len(fs) != 1 || fs[0].Code != CodeRetrySpanShort {
		t.Fatalf("findings %v", codes(fs))
	}
	f := fs[0]
	for _, want := range []string{"450 s", `"10m"`, "600 s"} {
		if !strings.Contains(f.What, want) {
			t.Errorf("what %q lacks %q", f.What, want)
		}
	}
	for _, want := range []string{"--outage 10m --attempts 5 --backoff-millis 30000 --max-backoff-millis 240000", "R × 150", "first 150 s"} {
		if !strings.Contains(f.Why, want) {
			t.Errorf("why %q lacks %q", f.Why, want)
		}
	}
	// Five retries span 690 s: the fix names the smallest retry_attempts.
	if !strings.Contains(f.Fix, "retry_attempts = 5 (span 690 s") {
		t.Errorf("fix %q", f.Fix)
	}
}

func TestTopologyBucketsNearLimit(t *testing.T) {
	var b strings.Builder
	// 26 buckets each (a warning per queue too); 120 queues need 3120.
	for i := range 120 {
		fmt.Fprintf(&b, "[[queue]]\nname = \"q%03d\"\nowner = \"o\"\nretry_attempts = 9\n", i)
		b.WriteString("retry_jitter_ratio = 0.2\nmax_retry_backoff_millis = 1000000\n")
	}
	r := NewReport(Static(parse(t, b.String())))
	if !r.Has(CodeTopologyBucketsNearLimit, "") {
		t.Fatalf("no %s in %d findings", CodeTopologyBucketsNearLimit, len(r.Findings))
	}
	if last := r.Findings[len(r.Findings)-1]; last.Code != CodeTopologyBucketsNearLimit {
		t.Errorf("the finding about no queue is not last: %v", last)
	}
}

func TestReportSortsAndCounts(t *testing.T) {
	r := NewReport([]Finding{
		{Severity: Info, Queue: "b", Code: "z"},
		{Severity: Warning, Code: "topology"},
		{Severity: Warning, Queue: "a", Code: "y"},
		{Severity: Error, Queue: "b", Code: "x"},
	})
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Queue+"/"+f.Code)
	}
	if strings.Join(got, ",") != "b/x,b/z,a/y,/topology" {
		t.Errorf("order %v", got)
	}
	if r.Errors != 1 || r.Warnings != 2 || r.Infos != 1 || !r.Failed(false) {
		t.Errorf("counts %+v", r)
	}
	w := NewReport([]Finding{{Severity: Warning, Queue: "a", Code: "y"}})
	if w.Failed(false) || !w.Failed(true) {
		t.Error("a warning must fail only with strict")
	}
	if e := NewReport(nil); e.Findings == nil || e.Failed(true) {
		t.Errorf("empty report %+v", e)
	}
}
