package lily

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/retry"
	"github.com/lily-mq/lily/transport"
)

// ErrInvalidConfig is wrapped by every configuration problem.
var ErrInvalidConfig = errors.New("invalid configuration")

// Ordering strategies (DESIGN §4).
const (
	OrderingReorder = "reorder"
	OrderingBlock   = "block"
	OrderingPark    = "park"
)

// Transport names of QueueConfig.Transport.
const (
	TransportSQLite   = "sqlite"
	TransportRabbitMQ = "rabbitmq"
	TransportKafka    = "kafka"
)

// BreakerEnabled reports whether the queue's consumers use the circuit
// breaker: as configured, else when retry_attempts > 0.
func (c QueueConfig) BreakerEnabled() bool {
	if c.Breaker != nil {
		return *c.Breaker
	}
	return c.RetryAttempts > 0
}

// DefaultRabbitMQURL is the broker used when the configuration names none.
const DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"

// Defaults of QueueConfig.
const (
	DefaultDeliveryLimit         = 5
	DefaultImmediateRetryMillis  = 200
	DefaultHandlerTimeoutMillis  = 30000
	DefaultMaxRedrives           = 2
	DefaultDLQRetentionHours     = 336
	MaxDeliveryLimit             = 1000
	MaxImmediateRetries          = 10
	DefaultBreakerFailureRatio   = 0.5
	DefaultBreakerMinRequests    = 20
	DefaultBreakerWindowMillis   = 10000
	DefaultBreakerCooldownMillis = 5000
	DefaultBucketMaxLength       = 100000
	DefaultDLQMaxLength          = 1000000
)

// QueueConfig is one [[queue]] entry of the configuration file: a logical
// queue with its retry schedule and dead-letter settings. The zero value of
// every field means its default; call WithDefaults, then Validate.
type QueueConfig struct {
	// Name of the queue, e.g. "orders.created". Required.
	Name string `toml:"name" json:"name"`
	// Transport carrying the queue: "sqlite", "rabbitmq" or "kafka".
	// Defaults to "sqlite".
	Transport string `toml:"transport" json:"transport"`
	// Exchange the queue is bound to (RabbitMQ). Defaults to the part of
	// Name before its first dot ("orders" for "orders.created").
	Exchange string `toml:"exchange" json:"exchange,omitempty"`
	// BindingKeys bind the queue to Exchange (RabbitMQ). Defaults to [Name].
	BindingKeys []string `toml:"binding_keys" json:"binding_keys,omitempty"`
	// RetryAttempts is the most framework retries after the first
	// processing, 0..100. Defaults to 0: a transient error dead-letters.
	RetryAttempts int `toml:"retry_attempts" json:"retry_attempts"`
	// RetryBackoffMillis is the first retry delay, > 0. Defaults to 1000.
	RetryBackoffMillis int64 `toml:"retry_backoff_millis" json:"retry_backoff_millis"`
	// MaxRetryBackoffMillis caps the exponential delay, >= the backoff.
	// Defaults to 60000.
	MaxRetryBackoffMillis int64 `toml:"max_retry_backoff_millis" json:"max_retry_backoff_millis"`
	// RetryJitterRatio spreads delays over lower/nominal/upper buckets,
	// finite 0.0..0.5. Defaults to 0.0.
	RetryJitterRatio float64 `toml:"retry_jitter_ratio" json:"retry_jitter_ratio"`
	// RetryDelaysMillis is an explicit delay chain in milliseconds, e.g.
	// [10000, 60000, 600000], instead of retry_backoff_millis and
	// max_retry_backoff_millis: retry n waits the n-th delay, the last
	// repeating when retry_attempts is longer (retry.Policy). A queue sets
	// one form: with a chain, neither retry_backoff_millis nor
	// max_retry_backoff_millis may be written. Jitter still applies.
	// Defaults to none (the exponential form).
	RetryDelaysMillis []int64 `toml:"retry_delays_millis" json:"retry_delays_millis,omitempty"`
	// ExpectedOutage is the longest dependency outage the queue's retries
	// should ride out, as a Go duration such as "10m"; >= 0. 'lily lint'
	// reports an error when the retry span is shorter: every message that
	// arrives in the first (outage − span) of such an outage is
	// dead-lettered. Defaults to none.
	ExpectedOutage string `toml:"expected_outage" json:"expected_outage,omitempty"`
	// DeliveryLimit is the most times one copy is handed to a handler;
	// the next delivery dead-letters it with reason delivery_limit, 1..1000.
	// Defaults to 5.
	DeliveryLimit int `toml:"delivery_limit" json:"delivery_limit"`
	// ImmediateRetries are in-process retries before a broker-delayed
	// retry, for blips, 0..10. Defaults to 0.
	ImmediateRetries int `toml:"immediate_retries" json:"immediate_retries"`
	// ImmediateRetryMillis is the pause between immediate retries, 0..10000.
	// Defaults to 200.
	ImmediateRetryMillis int64 `toml:"immediate_retry_millis" json:"immediate_retry_millis"`
	// HandlerTimeoutMillis cancels the handler's context after this long,
	// > 0. Defaults to 30000.
	HandlerTimeoutMillis int64 `toml:"handler_timeout_millis" json:"handler_timeout_millis"`
	// Ordering is "reorder", "block" or "park". Defaults to "reorder".
	Ordering string `toml:"ordering" json:"ordering"`
	// MaxRedrives is how often an entry may be redriven before it needs a
	// manual decision, 0..100. Defaults to 2.
	MaxRedrives int `toml:"max_redrives" json:"max_redrives"`
	// DLQRetentionHours is how long dead letters are kept before they are
	// discarded with a record, > 0. Defaults to 336 (14 days).
	DLQRetentionHours int `toml:"dlq_retention_hours" json:"dlq_retention_hours"`
	// SourceRetentionHours is how long the source keeps an unconsumed
	// message (e.g. the broker's or the producer's retention), >= 0; 'lily
	// lint' reports a dlq_retention_hours shorter than it. Defaults to 0
	// (unknown).
	SourceRetentionHours int `toml:"source_retention_hours" json:"source_retention_hours,omitempty"`
	// TriageHours is how long the owner may take to notice and triage a
	// dead letter, >= 0; 'lily lint' reports a dlq_retention_hours shorter
	// than twice it. Defaults to 0 (unknown).
	TriageHours int `toml:"triage_hours" json:"triage_hours,omitempty"`
	// BucketMaxLength caps each retry bucket (RabbitMQ x-max-length with
	// reject-publish: a full bucket refuses the hand-off, never drops).
	// Defaults to 100000.
	BucketMaxLength int64 `toml:"bucket_max_length" json:"bucket_max_length"`
	// DLQMaxLength caps the dead-letter queue the same way. Defaults to
	// 1000000.
	DLQMaxLength int64 `toml:"dlq_max_length" json:"dlq_max_length"`
	// SchemaVersions are the message schema versions (x-lily-schema-version)
	// the queue's consumers read, e.g. [4] or [3, 4]. 'lily dlq redrive'
	// refuses, without --force, to send entries of any other version back
	// to the queue, and warns in the dry run. Each is >= 1. Defaults to
	// none: not declared (redrive then only warns when the selection is
	// older than the newest version in the queue's catalog entries).
	SchemaVersions []int `toml:"schema_versions" json:"schema_versions,omitempty"`
	// Owner is the team or person who triages the queue's dead letters.
	// Defaults to "" (lint warns).
	Owner string `toml:"owner" json:"owner,omitempty"`
	// PermanentErrors extends the permanent allow-list: Go error type
	// names as printed by %T (e.g. "*orders.ValidationError"), or an import
	// path followed by "/..." for every error type of a package, that
	// dead-letter at once. They add to DefaultPermanentErrors (decode
	// errors), which always apply unless removed with retry_errors.
	// Defaults to none.
	PermanentErrors []string `toml:"permanent_errors" json:"permanent_errors,omitempty"`
	// RetryErrors removes entries from the default permanent allow-list
	// (DefaultPermanentErrors: JSON, XML, protobuf and base64 decode errors,
	// strconv errors), for a queue whose handler wants such an error
	// retried, e.g. ["*json.SyntaxError"]. Each must be an entry of that
	// list. Defaults to none: decode errors dead-letter at once.
	RetryErrors []string `toml:"retry_errors" json:"retry_errors,omitempty"`
	// Breaker turns the circuit breaker on or off: while the share of
	// transient failures is high, the consumer stops fetching, so that an
	// outage of a dependency becomes lag, not dead letters. Defaults to on
	// when retry_attempts > 0.
	Breaker *bool `toml:"breaker" json:"breaker,omitempty"`
	// BreakerFailureRatio opens the breaker when transient failures are at
	// least this share of the outcomes in the window, 0 < ratio <= 1.
	// Defaults to 0.5.
	BreakerFailureRatio float64 `toml:"breaker_failure_ratio" json:"breaker_failure_ratio"`
	// BreakerMinRequests is the fewest outcomes in the window before the
	// ratio counts, >= 1. Defaults to 20.
	BreakerMinRequests int `toml:"breaker_min_requests" json:"breaker_min_requests"`
	// BreakerWindowMillis is the sliding window of outcomes, > 0. Defaults
	// to 10000.
	BreakerWindowMillis int64 `toml:"breaker_window_millis" json:"breaker_window_millis"`
	// BreakerCooldownMillis is how long the breaker stays open before one
	// probe is let through, > 0. Defaults to 5000.
	BreakerCooldownMillis int64 `toml:"breaker_cooldown_millis" json:"breaker_cooldown_millis"`
}

// WithDefaults returns c with every zero field set to its default.
func (c QueueConfig) WithDefaults() QueueConfig {
	c.BreakerFailureRatio = cmp.Or(c.BreakerFailureRatio, DefaultBreakerFailureRatio)
	c.BreakerMinRequests = cmp.Or(c.BreakerMinRequests, DefaultBreakerMinRequests)
	c.BreakerWindowMillis = cmp.Or(c.BreakerWindowMillis, DefaultBreakerWindowMillis)
	c.BreakerCooldownMillis = cmp.Or(c.BreakerCooldownMillis, DefaultBreakerCooldownMillis)
	c.Transport = cmp.Or(c.Transport, TransportSQLite)
	if c.Exchange == "" {
		c.Exchange, _, _ = strings.Cut(c.Name, ".")
	}
	if len(c.BindingKeys) == 0 && c.Name != "" {
		c.BindingKeys = []string{c.Name}
	}
	if len(c.RetryDelaysMillis) == 0 { // a chain replaces backoff and max (retry.Policy)
		c.RetryBackoffMillis = cmp.Or(c.RetryBackoffMillis, retry.DefaultBackoffMillis)
		c.MaxRetryBackoffMillis = cmp.Or(c.MaxRetryBackoffMillis, max(retry.DefaultMaxBackoffMillis, c.RetryBackoffMillis))
	}
	c.DeliveryLimit = cmp.Or(c.DeliveryLimit, DefaultDeliveryLimit)
	c.ImmediateRetryMillis = cmp.Or(c.ImmediateRetryMillis, DefaultImmediateRetryMillis)
	c.HandlerTimeoutMillis = cmp.Or(c.HandlerTimeoutMillis, DefaultHandlerTimeoutMillis)
	c.Ordering = cmp.Or(c.Ordering, OrderingReorder)
	c.MaxRedrives = cmp.Or(c.MaxRedrives, DefaultMaxRedrives)
	c.DLQRetentionHours = cmp.Or(c.DLQRetentionHours, DefaultDLQRetentionHours)
	c.BucketMaxLength = cmp.Or(c.BucketMaxLength, DefaultBucketMaxLength)
	c.DLQMaxLength = cmp.Or(c.DLQMaxLength, DefaultDLQMaxLength)
	return c
}

// Policy returns the queue's retry schedule.
func (c QueueConfig) Policy() retry.Policy {
	return retry.Policy{
		Attempts:         c.RetryAttempts,
		BackoffMillis:    c.RetryBackoffMillis,
		MaxBackoffMillis: c.MaxRetryBackoffMillis,
		JitterRatio:      c.RetryJitterRatio,
		DelaysMillis:     c.RetryDelaysMillis,
	}
}

var queueName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$`)

// Validate reports every problem of c at once, each naming the queue, the
// field, the value and what is allowed. Call it after WithDefaults.
func (c QueueConfig) Validate() error {
	var errs []error
	q := c.Name
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("%w: queue %q: %s = %v: %s", ErrInvalidConfig, q, field, value, rule))
	}
	if !queueName.MatchString(c.Name) {
		bad("name", fmt.Sprintf("%q", c.Name), "must be 1..200 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	switch c.Transport {
	case TransportSQLite, TransportRabbitMQ, TransportKafka:
	default:
		bad("transport", fmt.Sprintf("%q", c.Transport), `must be "sqlite", "rabbitmq" or "kafka"`)
	}
	if err := c.Policy().Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("%w: queue %q: %s", ErrInvalidConfig, q, e.Error()))
		}
	} else if err := retry.CheckBuckets(q, c.Policy()); err != nil {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidConfig, err.Error()))
	}
	if c.DeliveryLimit < 1 || c.DeliveryLimit > MaxDeliveryLimit {
		bad("delivery_limit", c.DeliveryLimit, fmt.Sprintf("must be in 1..%d", MaxDeliveryLimit))
	}
	if c.ImmediateRetries < 0 || c.ImmediateRetries > MaxImmediateRetries {
		bad("immediate_retries", c.ImmediateRetries, fmt.Sprintf("must be in 0..%d", MaxImmediateRetries))
	}
	if c.ImmediateRetryMillis < 0 || c.ImmediateRetryMillis > 10000 {
		bad("immediate_retry_millis", c.ImmediateRetryMillis, "must be in 0..10000")
	}
	if c.HandlerTimeoutMillis <= 0 {
		bad("handler_timeout_millis", c.HandlerTimeoutMillis, "must be > 0")
	}
	switch c.Ordering {
	case OrderingReorder, OrderingBlock, OrderingPark:
	default:
		bad("ordering", fmt.Sprintf("%q", c.Ordering), `must be "reorder", "block" or "park"`)
	}
	if c.MaxRedrives < 0 || c.MaxRedrives > 100 {
		bad("max_redrives", c.MaxRedrives, "must be in 0..100")
	}
	if c.DLQRetentionHours <= 0 {
		bad("dlq_retention_hours", c.DLQRetentionHours, "must be > 0")
	}
	if c.SourceRetentionHours < 0 {
		bad("source_retention_hours", c.SourceRetentionHours, "must be >= 0 (0 = unknown)")
	}
	if c.TriageHours < 0 {
		bad("triage_hours", c.TriageHours, "must be >= 0 (0 = unknown)")
	}
	if c.ExpectedOutage != "" {
		if d, err := time.ParseDuration(c.ExpectedOutage); err != nil {
			bad("expected_outage", fmt.Sprintf("%q", c.ExpectedOutage), `must be a Go duration with a unit, e.g. "10m", "90s" or "1h30m"`)
		} else if d < 0 {
			bad("expected_outage", fmt.Sprintf("%q", c.ExpectedOutage), "must be >= 0")
		}
	}
	if c.BucketMaxLength < 1 {
		bad("bucket_max_length", c.BucketMaxLength, "must be >= 1")
	}
	if c.DLQMaxLength < 1 {
		bad("dlq_max_length", c.DLQMaxLength, "must be >= 1")
	}
	if !(c.BreakerFailureRatio > 0 && c.BreakerFailureRatio <= 1) {
		bad("breaker_failure_ratio", c.BreakerFailureRatio, "must be a number in (0, 1]")
	}
	if c.BreakerMinRequests < 1 {
		bad("breaker_min_requests", c.BreakerMinRequests, "must be >= 1")
	}
	if c.BreakerWindowMillis <= 0 {
		bad("breaker_window_millis", c.BreakerWindowMillis, "must be > 0")
	}
	if c.BreakerCooldownMillis <= 0 {
		bad("breaker_cooldown_millis", c.BreakerCooldownMillis, "must be > 0")
	}
	errs = append(errs, c.validateClassification()...)
	errs = append(errs, c.validateSchemaVersions()...)
	return errors.Join(errs...)
}

// ExpectedOutageDuration returns ExpectedOutage as a duration: 0 when it
// is empty or not a valid duration (Validate reports the latter).
func (c QueueConfig) ExpectedOutageDuration() time.Duration {
	d, err := time.ParseDuration(c.ExpectedOutage)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// unjoin splits an errors.Join result into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Config is a Lily configuration file.
type Config struct {
	// DB is the embedded SQLite database file. Defaults to "lily.db".
	DB string `toml:"db" json:"db"`
	// RabbitMQURL is the broker of the queues with transport "rabbitmq".
	// Defaults to "amqp://guest:guest@127.0.0.1:5672/".
	RabbitMQURL string `toml:"rabbitmq_url" json:"rabbitmq_url,omitempty"`
	// KafkaBrokers are the seed brokers ("host:port") of the queues with
	// transport "kafka"; the --brokers flag overrides them. Defaults to
	// ["127.0.0.1:9092"].
	KafkaBrokers []string `toml:"kafka_brokers" json:"kafka_brokers,omitempty"`
	// KafkaPartitions is the partition count of the topics 'lily topology
	// apply' creates for a kafka queue whose topic does not exist yet,
	// 1..10000. Defaults to 3.
	KafkaPartitions int32 `toml:"kafka_partitions" json:"kafka_partitions,omitempty"`
	// KafkaDeadLetterTopics maps a kafka queue (topic) to the dead-letter
	// topic Lily writes to and 'lily dlq ingest' reads, when it is not
	// "<queue>.dlt": e.g. one written by Spring Kafka ("orders-dlt"),
	// Kafka Connect or Kafka Streams. Defaults to none.
	KafkaDeadLetterTopics map[string]string `toml:"kafka_dead_letter_topics" json:"kafka_dead_letter_topics,omitempty"`
	// RedactPatterns are extra regular expressions whose matches are masked
	// in error messages and stacks. Defaults to none (the built-in
	// patterns always apply).
	RedactPatterns []string `toml:"redact_patterns" json:"redact_patterns,omitempty"`
	// Queues are the [[queue]] entries.
	Queues []QueueConfig `toml:"queue" json:"queues"`
	// Tokens are the [[token]] entries: named credentials with a role for
	// the HTTP API and console ('lily serve'). Defaults to none.
	Tokens []TokenConfig `toml:"token" json:"tokens,omitempty"`
}

// WithDefaults returns c with defaults applied to it and every queue.
func (c Config) WithDefaults() Config {
	c.DB = cmp.Or(c.DB, "lily.db")
	c.RabbitMQURL = cmp.Or(c.RabbitMQURL, DefaultRabbitMQURL)
	c = c.withKafkaDefaults()
	qs := make([]QueueConfig, len(c.Queues))
	for i, q := range c.Queues {
		qs[i] = q.WithDefaults()
	}
	c.Queues = qs
	return c
}

// Validate reports every problem of every queue at once, plus duplicate
// names, bad redaction patterns, the topology-wide bucket limit and the
// problems of the [[token]] entries.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	counts := map[string]int{}
	for _, q := range c.Queues {
		if err := q.Validate(); err != nil {
			errs = append(errs, unjoin(err)...)
		} else {
			counts[q.Name] = len(q.Policy().Buckets())
		}
		if seen[q.Name] {
			errs = append(errs, fmt.Errorf("%w: queue %q is declared twice: names must be unique", ErrInvalidConfig, q.Name))
		}
		seen[q.Name] = true
	}
	if err := retry.CheckTopology(counts); err != nil {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidConfig, err.Error()))
	}
	errs = append(errs, c.validateKafka()...)
	for _, p := range c.RedactPatterns {
		if _, err := evidence.NewRedactor(p); err != nil {
			errs = append(errs, fmt.Errorf("%w: redact_patterns: %q: %v", ErrInvalidConfig, p, err))
		}
	}
	errs = append(errs, c.validateTokens()...)
	return errors.Join(errs...)
}

// Queue returns the queue named name.
func (c Config) Queue(name string) (QueueConfig, bool) {
	for _, q := range c.Queues {
		if q.Name == name {
			return q, true
		}
	}
	return QueueConfig{}, false
}

// ParseConfig decodes a TOML configuration, applies defaults and validates
// it. Unknown fields are errors (a misspelt field would otherwise be a
// silent default).
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return Config{}, fmt.Errorf("%w: unknown field(s):\n%s", ErrInvalidConfig, sm.String())
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return Config{}, fmt.Errorf("%w: line %d, column %d: %v", ErrInvalidConfig, row, col, de)
		}
		return Config{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads and parses the TOML file at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Spec returns the transport-level description of the queue (for
// transport.Declarer): name, exchange, bindings, delivery limit, buckets.
func (c QueueConfig) Spec() transport.QueueSpec {
	return transport.QueueSpec{
		Name:            c.Name,
		Exchange:        c.Exchange,
		BindingKeys:     c.BindingKeys,
		DeliveryLimit:   c.DeliveryLimit,
		BucketsMillis:   c.Policy().Buckets(),
		BucketMaxLength: c.BucketMaxLength,
		DLQMaxLength:    c.DLQMaxLength,

		SingleActiveConsumer: c.Ordering == OrderingBlock || c.Ordering == OrderingPark,
	}
}
