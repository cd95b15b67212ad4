package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/retry"
)

const fullConfig = `
db = "/var/lib/lily/lily.db"
redact_patterns = ['token=(\w+)', 'ssn-\d{3}']

[[queue]]
name = "orders.created"
transport = "rabbitmq"
exchange = "shop"
binding_keys = ["orders.created", "orders.created.eu"]
retry_attempts = 3
retry_backoff_millis = 1000
max_retry_backoff_millis = 60000
retry_jitter_ratio = 0.2
expected_outage = "10m"
expected_rate_per_second = 12.5
delivery_limit = 7
immediate_retries = 2
immediate_retry_millis = 150
handler_timeout_millis = 5000
ordering = "park"
max_redrives = 4
dlq_retention_hours = 72
source_retention_hours = 48
triage_hours = 24
bucket_max_length = 5000
dlq_max_length = 50000
owner = "team-orders"
permanent_errors = ["*json.SyntaxError", "*orders.ValidationError"]
retry_errors = ["*strconv.NumError"]
schema_versions = [3, 4]
content_type = "application/json"
breaker = false
breaker_failure_ratio = 0.75
breaker_min_requests = 7
breaker_window_millis = 3000
breaker_cooldown_millis = 900

[[queue]]
name = "payments"
transport = "kafka"
exchange = "money"
binding_keys = ["payments.#"]
retry_attempts = 5
retry_delays_millis = [250, 1000, 4000]
retry_jitter_ratio = 0.0
delivery_limit = 3
immediate_retries = 0
immediate_retry_millis = 10
handler_timeout_millis = 100
ordering = "block"
max_redrives = 1
dlq_retention_hours = 1
bucket_max_length = 1
dlq_max_length = 2
owner = "team-pay"
permanent_errors = []

[[queue]]
name = "emails"
transport = "kafka"
kafka_share_group = "email-senders"
`

func TestParseConfigFull(t *testing.T) {
	c, err := ParseConfig([]byte(fullConfig))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.DB != "/var/lib/lily/lily.db" {
		t.Errorf("DB = %q", c.DB)
	}
	if want := []string{`token=(\w+)`, `ssn-\d{3}`}; !reflect.DeepEqual(c.RedactPatterns, want) {
		t.Errorf("RedactPatterns = %q, want %q", c.RedactPatterns, want)
	}
	want := []lily.QueueConfig{
		{
			Name: "orders.created", Transport: "rabbitmq", Exchange: "shop",
			BindingKeys:   []string{"orders.created", "orders.created.eu"},
			RetryAttempts: 3, RetryBackoffMillis: new(int64(1000)), MaxRetryBackoffMillis: new(int64(60000)), RetryJitterRatio: 0.2,
			DeliveryLimit: new(7), ImmediateRetries: 2, ImmediateRetryMillis: new(int64(150)), HandlerTimeoutMillis: new(int64(5000)),
			Ordering: "park", MaxRedrives: new(4), DLQRetentionHours: new(72), BucketMaxLength: new(int64(5000)), DLQMaxLength: new(int64(50000)),
			ExpectedOutage: "10m", ExpectedRatePerSecond: 12.5, SourceRetentionHours: 48, TriageHours: 24,
			Owner:           "team-orders",
			PermanentErrors: []string{"*json.SyntaxError", "*orders.ValidationError"},
			RetryErrors:     []string{"*strconv.NumError"}, SchemaVersions: []int{3, 4}, ContentType: "application/json",
			Breaker: new(bool), BreakerFailureRatio: new(0.75), BreakerMinRequests: new(7),
			BreakerWindowMillis: new(int64(3000)), BreakerCooldownMillis: new(int64(900)),
		},
		{
			Name: "payments", Transport: "kafka", Exchange: "money",
			BindingKeys:   []string{"payments.#"},
			RetryAttempts: 5, RetryDelaysMillis: []int64{250, 1000, 4000}, RetryJitterRatio: 0,
			DeliveryLimit: new(3), ImmediateRetries: 0, ImmediateRetryMillis: new(int64(10)), HandlerTimeoutMillis: new(int64(100)),
			Ordering: "block", MaxRedrives: new(1), DLQRetentionHours: new(1), BucketMaxLength: new(int64(1)), DLQMaxLength: new(int64(2)),
			Owner:               "team-pay",
			PermanentErrors:     []string{},
			BreakerFailureRatio: new(0.5), BreakerMinRequests: new(20), BreakerWindowMillis: new(int64(10000)), BreakerCooldownMillis: new(int64(5000)),
		},
		lily.QueueConfig{Name: "emails", Transport: "kafka", KafkaShareGroup: "email-senders"}.WithDefaults(),
	}
	// The first queue sets every field: a new field must be added here. The
	// delay chain is one exception (it excludes the backoff fields): the
	// second queue sets it; the share group another (it excludes ordering
	// park): the third sets it.
	v := reflect.ValueOf(want[0])
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Name == "RetryDelaysMillis" {
			if !strings.Contains(fullConfig, "\nretry_delays_millis = ") || len(want[1].RetryDelaysMillis) == 0 {
				t.Error("test setup: retry_delays_millis is not set in the second queue")
			}
			continue
		}
		if f.Name == "KafkaShareGroup" {
			if !strings.Contains(fullConfig, "\nkafka_share_group = ") || want[2].KafkaShareGroup == "" {
				t.Error("test setup: kafka_share_group is not set in the third queue")
			}
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("test setup: QueueConfig.%s is not set in the full configuration", f.Name)
		}
		if tag := f.Tag.Get("toml"); !strings.Contains(fullConfig, "\n"+tag+" = ") {
			t.Errorf("test setup: field %s (toml %q) is missing from the full configuration", f.Name, tag)
		}
	}
	if len(c.Queues) != len(want) {
		t.Fatalf("got %d queues, want %d", len(c.Queues), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(c.Queues[i], want[i]) {
			t.Errorf("queue %d:\n got %+v\nwant %+v", i, c.Queues[i], want[i])
		}
	}
	q, ok := c.Queue("payments")
	if !ok || q.Transport != "kafka" {
		t.Errorf("Queue(payments) = %+v, %v", q, ok)
	}
	if _, ok := c.Queue("nope"); ok {
		t.Error("Queue(nope) found")
	}
	// The spec of a queue carries its buckets (docs/design.md §5 example).
	spec := c.Queues[0].Spec()
	if want := []int64{1000, 1200, 1600, 2000, 2400, 3200, 4000, 4800}; !reflect.DeepEqual(spec.BucketsMillis, want) {
		t.Errorf("BucketsMillis = %v, want %v", spec.BucketsMillis, want)
	}
	if spec.Name != "orders.created" || spec.Exchange != "shop" || spec.DeliveryLimit != 7 ||
		spec.BucketMaxLength != 5000 || spec.DLQMaxLength != 50000 ||
		!reflect.DeepEqual(spec.BindingKeys, []string{"orders.created", "orders.created.eu"}) {
		t.Errorf("Spec = %+v", spec)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`
[[queue]]
name = "orders.created"

[[queue]]
name = "audit"
retry_backoff_millis = 120000
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.DB != "lily.db" {
		t.Errorf("DB = %q, want lily.db", c.DB)
	}
	want := lily.QueueConfig{
		Name: "orders.created", Transport: lily.TransportSQLite, Exchange: "orders",
		BindingKeys:   []string{"orders.created"},
		RetryAttempts: 0, RetryBackoffMillis: new(int64(1000)), MaxRetryBackoffMillis: new(int64(60000)), RetryJitterRatio: 0,
		DeliveryLimit: new(5), ImmediateRetries: 0, ImmediateRetryMillis: new(int64(200)), HandlerTimeoutMillis: new(int64(30000)),
		Ordering: lily.OrderingReorder, MaxRedrives: new(2), DLQRetentionHours: new(336),
		BucketMaxLength: new(int64(100000)), DLQMaxLength: new(int64(1000000)),
		BreakerFailureRatio: new(0.5), BreakerMinRequests: new(20), BreakerWindowMillis: new(int64(10000)), BreakerCooldownMillis: new(int64(5000)),
	}
	if !reflect.DeepEqual(c.Queues[0], want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c.Queues[0], want)
	}
	a := c.Queues[1]
	if a.Exchange != "audit" || !reflect.DeepEqual(a.BindingKeys, []string{"audit"}) {
		t.Errorf("name without a dot: exchange %q, binding keys %q", a.Exchange, a.BindingKeys)
	}
	if a.Settings().MaxRetryBackoffMillis != 120000 {
		t.Errorf("max backoff with a large base = %d, want 120000 (never below the base)", a.Settings().MaxRetryBackoffMillis)
	}
	if a.Spec().BucketsMillis != nil && len(a.Spec().BucketsMillis) != 0 {
		t.Errorf("retry_attempts 0 declares buckets %v", a.Spec().BucketsMillis)
	}
}

// TestValidateReportsEveryProblem: one configuration with many problems
// gives one error that names each field, its value and the allowed range.
func TestValidateReportsEveryProblem(t *testing.T) {
	_, err := ParseConfig([]byte(`
[[queue]]
name = "orders.created"
transport = "carrier-pigeon"
retry_attempts = 101
retry_backoff_millis = 5000
max_retry_backoff_millis = 1000
retry_jitter_ratio = 0.6
delivery_limit = -1
ordering = "fifo"
immediate_retries = 11
handler_timeout_millis = -5
max_redrives = 101
dlq_retention_hours = -1
bucket_max_length = -1
dlq_max_length = -2

[[queue]]
name = "bad name!"
retry_jitter_ratio = nan
`))
	if err == nil {
		t.Fatal("ParseConfig accepted an invalid configuration")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`transport = "carrier-pigeon"`, `"sqlite", "rabbitmq", "kafka", "sqs", "pubsub", "nats" or "azqueue"`,
		"retry_attempts 101", "0..100",
		"max_retry_backoff_millis 1000", ">= retry_backoff_millis (5000)",
		"retry_jitter_ratio 0.6", "0.0..0.5",
		"delivery_limit = -1", "1..1000",
		`ordering = "fifo"`,
		"immediate_retries = 11",
		"handler_timeout_millis = -5",
		"max_redrives = 101",
		"dlq_retention_hours = -1",
		"bucket_max_length = -1",
		"dlq_max_length = -2",
		`name = "bad name!"`,
		"retry_jitter_ratio NaN",
		`queue "orders.created"`, `queue "bad name!"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	// One line per problem: 12 problems in the first queue, 2 in the second.
	if n := strings.Count(msg, ErrInvalidConfig.Error()); n != 14 {
		t.Errorf("error reports %d problems, want 14:\n%s", n, msg)
	}
}

func TestValidateTooManyBucketsInQueue(t *testing.T) {
	p := retry.Policy{Attempts: 20, BackoffMillis: 1000, MaxBackoffMillis: 1 << 40, JitterRatio: 0.5}
	n := len(p.Buckets())
	if n <= retry.MaxBucketsPerQueue {
		t.Fatalf("test setup: %d buckets, want more than %d", n, retry.MaxBucketsPerQueue)
	}
	_, err := ParseConfig([]byte(fmt.Sprintf(`
[[queue]]
name = "orders.created"

[[queue]]
name = "orders.heavy"
retry_attempts = 20
retry_jitter_ratio = 0.5
max_retry_backoff_millis = %d
`, int64(1)<<40)))
	if err == nil {
		t.Fatal("a queue with too many buckets was accepted")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
	}
	for _, want := range []string{`"orders.heavy"`, fmt.Sprint(n), "32"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), `"orders.created"`) {
		t.Errorf("the valid queue is blamed: %v", err)
	}
}

// topology returns a config of n queues with 32 buckets each.
func topology(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "[[queue]]\nname = \"q%03d\"\nretry_attempts = 100\nretry_backoff_millis = 1\nmax_retry_backoff_millis = %d\n\n", i, int64(1)<<31)
	}
	return b.String()
}

func TestValidateTooManyBucketsInTopology(t *testing.T) {
	if _, err := ParseConfig([]byte(topology(128))); err != nil {
		t.Fatalf("128 queues of 32 buckets (4096) rejected: %v", err)
	}
	_, err := ParseConfig([]byte(topology(129)))
	if err == nil {
		t.Fatal("129 queues of 32 buckets (4128) accepted")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
	}
	for _, want := range []string{"4128", "129 queues", "4096"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestParseConfigUnknownField(t *testing.T) {
	_, err := ParseConfig([]byte(`
[[queue]]
name = "orders.created"
retry_attempt = 3
`))
	if err == nil {
		t.Fatal("a misspelt field was accepted (it would be a silent default)")
	}
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "retry_attempt") {
		t.Errorf("error = %v, want ErrInvalidConfig naming retry_attempt", err)
	}
}

func TestParseConfigSyntaxAndTypeErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"syntax":       "[[queue]\nname = \"x\"\n",
		"wrong type":   "[[queue]]\nname = \"x\"\nretry_attempts = \"three\"\n",
		"unterminated": "db = \"x\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(doc))
			if err == nil || !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("ParseConfig = %v, want an ErrInvalidConfig", err)
			}
		})
	}
}

func TestValidateDuplicateQueue(t *testing.T) {
	_, err := ParseConfig([]byte(`
[[queue]]
name = "orders.created"
[[queue]]
name = "payments"
[[queue]]
name = "orders.created"
`))
	if err == nil {
		t.Fatal("duplicate queue accepted")
	}
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"orders.created" is declared twice`) {
		t.Errorf("error = %v", err)
	}
	if strings.Contains(err.Error(), `"payments"`) {
		t.Errorf("the unique queue is blamed: %v", err)
	}
}

func TestValidateRedactPatterns(t *testing.T) {
	_, err := ParseConfig([]byte(`
redact_patterns = ['ok-\d+', '([unclosed', '(?P<bad']
[[queue]]
name = "orders.created"
`))
	if err == nil {
		t.Fatal("bad redact pattern accepted")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
	}
	for _, want := range []string{"redact_patterns", `"([unclosed"`, `"(?P<bad"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), `ok-`) {
		t.Errorf("the valid pattern is blamed: %v", err)
	}
}

// TestValidateEmptyRedactPattern: evidence.NewRedactor rejects an empty
// pattern (it matches everything), so a configuration with one must not
// validate and then fail when the consumer builds its redactor.
func TestValidateEmptyRedactPattern(t *testing.T) {
	_, err := ParseConfig([]byte(`
redact_patterns = ['']
[[queue]]
name = "orders.created"
`))
	if err == nil {
		t.Fatal("an empty redact pattern was accepted, but evidence.NewRedactor rejects it")
	}
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "redact_patterns") {
		t.Errorf("error = %v, want ErrInvalidConfig naming redact_patterns", err)
	}
}

func TestConfigValidateCollectsAcrossQueues(t *testing.T) {
	c := Config{Queues: []lily.QueueConfig{
		{Name: "a", DeliveryLimit: new(-1)},
		{Name: "b", Ordering: "random"},
		{Name: "c"},
	}}.WithDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted two bad queues")
	}
	for _, want := range []string{`queue "a": delivery_limit`, `queue "b": ordering`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), `queue "c"`) {
		t.Errorf("valid queue c blamed: %v", err)
	}
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("empty config: %v", err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(dir, "nope.toml")
		_, err := LoadConfig(path)
		if err == nil {
			t.Fatal("LoadConfig of a missing file succeeded")
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("error does not wrap fs.ErrNotExist: %v", err)
		}
		if !strings.Contains(err.Error(), "nope.toml") {
			t.Errorf("error does not name the file: %v", err)
		}
	})
	t.Run("valid file", func(t *testing.T) {
		path := filepath.Join(dir, "lily.toml")
		if err := os.WriteFile(path, []byte(fullConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path)
		if err != nil {
			t.Fatalf("LoadConfig: %v", err)
		}
		if len(c.Queues) != 3 || c.Queues[1].Name != "payments" || c.Queues[2].KafkaShareGroup != "email-senders" {
			t.Errorf("LoadConfig queues = %+v", c.Queues)
		}
	})
	t.Run("invalid file names the path", func(t *testing.T) {
		path := filepath.Join(dir, "bad.toml")
		if err := os.WriteFile(path, []byte("[[queue]]\nname = \"x\"\ndelivery_limit = -3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		if err == nil || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("LoadConfig = %v, want ErrInvalidConfig", err)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "delivery_limit") {
			t.Errorf("error lacks the path or the field: %v", err)
		}
	})
}

// TestNATSSettings: the NATS settings are checked, each error naming the
// setting and the fix.
func TestNATSSettings(t *testing.T) {
	bad := new(0)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{NATSURL: "http://127.0.0.1:4222"}, "nats_url"},
		{Config{NATSAckWaitSeconds: bad}, "nats_ack_wait_seconds = 0"},
		{Config{NATSRetention: "interest"}, `nats_retention = "interest"`},
		{Config{Queues: []lily.QueueConfig{{Name: "orders.", Transport: lily.TransportNATS}}}, "empty tokens"},
		{Config{Queues: []lily.QueueConfig{{Name: "orders created", Transport: lily.TransportNATS}}}, `queue "orders created": a nats queue's name`},
		{Config{Queues: []lily.QueueConfig{{Name: "orders.>", Transport: lily.TransportNATS}}}, `queue "orders.>": a nats queue's name`},
		{Config{NATSQueues: map[string]NATSBinding{"missing": {Stream: "ORDERS"}}}, `nats_queues: "missing": no [[queue]]`},
		{Config{NATSQueues: map[string]NATSBinding{"q": {Stream: "OR.DERS"}}, Queues: []lily.QueueConfig{{Name: "q", Transport: lily.TransportNATS}}}, `stream = "OR.DERS": a JetStream name`},
	} {
		err := c.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	ok := Config{NATSURL: "nats://a:4222, nats://b:4222", NATSAckWaitSeconds: new(60), NATSRetention: "limits",
		Queues: []lily.QueueConfig{{Name: "orders.created", Transport: lily.TransportNATS}}}
	if err := ok.WithDefaults().Validate(); err != nil {
		t.Errorf("valid NATS settings refused: %v", err)
	}
	if got := ok.NATSAckWait(); got != time.Minute {
		t.Errorf("NATSAckWait %s, want 1m", got)
	}
}
