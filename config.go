package lily

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/lily-mq/lily/retry"
	"github.com/lily-mq/lily/transport"
)

// ErrInvalidConfig is wrapped by every configuration problem.
var ErrInvalidConfig = errors.New("invalid configuration")

// Ordering strategies (docs/design.md §4).
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
	// TransportSQS is Amazon SQS (package transport/sqs).
	TransportSQS = "sqs"
	// TransportPubSub is Google Cloud Pub/Sub (package transport/pubsub).
	TransportPubSub = "pubsub"
	// TransportNATS is NATS JetStream (package transport/nats).
	TransportNATS = "nats"
	// TransportAzQueue is Azure Storage queues (package transport/azqueue).
	TransportAzQueue = "azqueue"
)

// BreakerEnabled reports whether the queue's consumers use the circuit
// breaker: as configured, else when retry_attempts > 0.
func (c QueueConfig) BreakerEnabled() bool {
	if c.Breaker != nil {
		return *c.Breaker
	}
	return c.RetryAttempts > 0
}

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

// QueueConfig is one [[queue]] entry of the configuration file (package
// config parses the file): a logical queue with its retry schedule and
// dead-letter settings. Call WithDefaults, then Validate.
//
// Zero is a value. A string, slice or bool field that is empty means its
// default. A numeric field whose 0 is a legal setting and also its default
// (RetryAttempts, RetryJitterRatio, ImmediateRetries,
// SourceRetentionHours, TriageHours, ExpectedRatePerSecond) is a plain
// number. Every other numeric field is a pointer: nil means "unset, use
// the default"; a non-nil pointer is taken as written, so that
// MaxRedrives: new(0) means "always a manual decision" and DeliveryLimit:
// new(0) is refused by Validate instead of becoming 5. In TOML, a key that
// is absent is nil and a key written as 0 is 0. Go callers write
//
//	lily.QueueConfig{Name: "orders.created", RetryAttempts: 3, DeliveryLimit: new(10),
//		RetryBackoffMillis: new(int64(500))}
//
// (Go 1.26's new(expr)). WithDefaults sets every pointer, so a defaulted
// QueueConfig shows every value it runs with (as JSON, too). To read the
// values, use Settings, which resolves nil to the default itself and so
// is safe on any QueueConfig: q.Settings().DeliveryLimit, never
// *q.DeliveryLimit.
type QueueConfig struct {
	// Name of the queue, e.g. "orders.created". Required.
	Name string `toml:"name" json:"name"`
	// Transport carrying the queue: "sqlite", "rabbitmq", "kafka", "sqs", "pubsub", "nats" or "azqueue".
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
	RetryBackoffMillis *int64 `toml:"retry_backoff_millis" json:"retry_backoff_millis,omitempty"`
	// MaxRetryBackoffMillis caps the exponential delay, >= the backoff.
	// Defaults to 60000, or to the backoff if that is larger.
	MaxRetryBackoffMillis *int64 `toml:"max_retry_backoff_millis" json:"max_retry_backoff_millis,omitempty"`
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
	// ExpectedRatePerSecond is the queue's expected traffic in messages
	// per second, finite and >= 0; with ExpectedOutage, 'lily lint'
	// checks that the retry buckets can hold what an outage sends them
	// (buckets × bucket_max_length). Defaults to 0 (unknown).
	ExpectedRatePerSecond float64 `toml:"expected_rate_per_second" json:"expected_rate_per_second,omitempty"`
	// DeliveryLimit is the most times one copy is handed to a handler;
	// the next delivery dead-letters it with reason delivery_limit, 1..1000.
	// Defaults to 5, or to 4 on a queue with KafkaShareGroup (the broker's
	// default group.share.delivery.count.limit is 5, and Lily must
	// dead-letter before the broker archives).
	DeliveryLimit *int `toml:"delivery_limit" json:"delivery_limit,omitempty"`
	// KafkaShareGroup consumes a kafka queue through a Kafka share group
	// (KIP-932, queue semantics) of this name instead of a consumer group:
	// several members share each partition, the broker counts deliveries
	// and locks each record while it is held. Share groups keep no per-key
	// order, so ordering must be "reorder". Requires Kafka 4.1+ with share
	// groups enabled (4.2+ for lock renewal). Defaults to "" (a consumer
	// group, "lily.<queue>").
	KafkaShareGroup string `toml:"kafka_share_group" json:"kafka_share_group,omitempty"`
	// ImmediateRetries are in-process retries before a broker-delayed
	// retry, for blips, 0..10. Defaults to 0.
	ImmediateRetries int `toml:"immediate_retries" json:"immediate_retries"`
	// ImmediateRetryMillis is the pause between immediate retries, 0..10000
	// (0: retry at once). Defaults to 200.
	ImmediateRetryMillis *int64 `toml:"immediate_retry_millis" json:"immediate_retry_millis,omitempty"`
	// HandlerTimeoutMillis cancels the handler's context after this long,
	// > 0. Defaults to 30000. A transport whose lease the runtime cannot
	// extend refuses a timeout (plus grace and immediate retries) that does
	// not fit in it; the SQLite transport's lease is extended while the
	// handler runs.
	HandlerTimeoutMillis *int64 `toml:"handler_timeout_millis" json:"handler_timeout_millis,omitempty"`
	// Ordering is "reorder", "block" or "park". Defaults to "reorder".
	Ordering string `toml:"ordering" json:"ordering"`
	// MaxRedrives is how often an entry may be redriven before it needs a
	// manual decision, 0..100; 0 makes every redrive a manual decision.
	// Defaults to 2.
	MaxRedrives *int `toml:"max_redrives" json:"max_redrives,omitempty"`
	// DLQRetentionHours is how long dead letters are kept before they are
	// discarded with a record, > 0. Defaults to 336 (14 days).
	DLQRetentionHours *int `toml:"dlq_retention_hours" json:"dlq_retention_hours,omitempty"`
	// SourceRetentionHours is how long the source keeps an unconsumed
	// message (e.g. the broker's or the producer's retention), >= 0; 'lily
	// lint' reports a dlq_retention_hours that is not longer. Defaults to
	// 0 (unknown).
	SourceRetentionHours int `toml:"source_retention_hours" json:"source_retention_hours,omitempty"`
	// TriageHours is how long the owner may take to notice and triage a
	// dead letter, >= 0; 'lily lint' reports a dlq_retention_hours shorter
	// than twice it. Defaults to 0 (unknown).
	TriageHours int `toml:"triage_hours" json:"triage_hours,omitempty"`
	// BucketMaxLength caps each retry bucket (RabbitMQ x-max-length with
	// reject-publish: a full bucket refuses the hand-off, never drops),
	// >= 1. Defaults to 100000.
	BucketMaxLength *int64 `toml:"bucket_max_length" json:"bucket_max_length,omitempty"`
	// DLQMaxLength caps the dead-letter queue the same way, >= 1. Defaults
	// to 1000000.
	DLQMaxLength *int64 `toml:"dlq_max_length" json:"dlq_max_length,omitempty"`
	// SchemaVersions are the message schema versions (x-lily-schema-version)
	// the queue's consumers read, e.g. [4] or [3, 4]. 'lily dlq redrive'
	// refuses, without --force, to send entries of any other version back
	// to the queue, and warns in the dry run. Each is >= 1. Defaults to
	// none: not declared (redrive then only warns when the selection is
	// older than the newest version in the queue's catalog entries).
	SchemaVersions []int `toml:"schema_versions" json:"schema_versions,omitempty"`
	// ContentType is the media type of the queue's message bodies:
	// "application/json" (or any "+json" type), "text/plain" (any
	// "text/..." type), "application/octet-stream" or "" (not declared).
	// 'lily dlq edit' refuses an edited body that does not decode as it
	// (JSON must parse, text must be UTF-8). Defaults to "" (any body).
	ContentType string `toml:"content_type" json:"content_type,omitempty"`
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
	BreakerFailureRatio *float64 `toml:"breaker_failure_ratio" json:"breaker_failure_ratio,omitempty"`
	// BreakerMinRequests is the fewest outcomes in the window before the
	// ratio counts, >= 1. Defaults to 20.
	BreakerMinRequests *int `toml:"breaker_min_requests" json:"breaker_min_requests,omitempty"`
	// BreakerWindowMillis is the sliding window of outcomes, > 0. Defaults
	// to 10000.
	BreakerWindowMillis *int64 `toml:"breaker_window_millis" json:"breaker_window_millis,omitempty"`
	// BreakerCooldownMillis is how long the breaker stays open before one
	// probe is let through, > 0. Defaults to 5000.
	BreakerCooldownMillis *int64 `toml:"breaker_cooldown_millis" json:"breaker_cooldown_millis,omitempty"`
}

// QueueSettings are the numeric settings of a QueueConfig as they run:
// each pointer field resolved, its default where it is nil. Get them with
// QueueConfig.Settings. The fields are those of QueueConfig, by the same
// names.
type QueueSettings struct {
	RetryBackoffMillis    int64
	MaxRetryBackoffMillis int64
	DeliveryLimit         int
	ImmediateRetryMillis  int64
	HandlerTimeoutMillis  int64
	MaxRedrives           int
	DLQRetentionHours     int
	BucketMaxLength       int64
	DLQMaxLength          int64
	BreakerFailureRatio   float64
	BreakerMinRequests    int
	BreakerWindowMillis   int64
	BreakerCooldownMillis int64
}

// or returns *p, or def when p is nil.
func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Settings returns c's numeric settings: each as written, or its default
// when unset (nil). It is safe on a QueueConfig without WithDefaults and
// is how the runtime, the transports and the tools read these fields.
func (c QueueConfig) Settings() QueueSettings {
	backoff := or(c.RetryBackoffMillis, retry.DefaultBackoffMillis)
	maxBackoff := or(c.MaxRetryBackoffMillis, max(retry.DefaultMaxBackoffMillis, backoff))
	if len(c.RetryDelaysMillis) > 0 {
		// A delay chain replaces backoff and max: unset, they are 0 (and
		// set beside a chain, Validate refuses them).
		backoff, maxBackoff = or(c.RetryBackoffMillis, 0), or(c.MaxRetryBackoffMillis, 0)
	}
	return QueueSettings{
		RetryBackoffMillis:    backoff,
		MaxRetryBackoffMillis: maxBackoff,
		DeliveryLimit:         or(c.DeliveryLimit, c.defaultDeliveryLimit()),
		ImmediateRetryMillis:  or(c.ImmediateRetryMillis, DefaultImmediateRetryMillis),
		HandlerTimeoutMillis:  or(c.HandlerTimeoutMillis, DefaultHandlerTimeoutMillis),
		MaxRedrives:           or(c.MaxRedrives, DefaultMaxRedrives),
		DLQRetentionHours:     or(c.DLQRetentionHours, DefaultDLQRetentionHours),
		BucketMaxLength:       or(c.BucketMaxLength, DefaultBucketMaxLength),
		DLQMaxLength:          or(c.DLQMaxLength, DefaultDLQMaxLength),
		BreakerFailureRatio:   or(c.BreakerFailureRatio, DefaultBreakerFailureRatio),
		BreakerMinRequests:    or(c.BreakerMinRequests, DefaultBreakerMinRequests),
		BreakerWindowMillis:   or(c.BreakerWindowMillis, DefaultBreakerWindowMillis),
		BreakerCooldownMillis: or(c.BreakerCooldownMillis, DefaultBreakerCooldownMillis),
	}
}

// WithDefaults returns c with every unset field set to its default: empty
// strings and slices, and nil pointers (each to a new value, shared with
// nothing). A field set to 0 keeps its 0; Validate judges it.
func (c QueueConfig) WithDefaults() QueueConfig {
	s := c.Settings()
	c.Transport = cmp.Or(c.Transport, TransportSQLite)
	if c.Exchange == "" {
		c.Exchange, _, _ = strings.Cut(c.Name, ".")
	}
	if len(c.BindingKeys) == 0 && c.Name != "" {
		c.BindingKeys = []string{c.Name}
	}
	c.Ordering = cmp.Or(c.Ordering, OrderingReorder)
	if len(c.RetryDelaysMillis) == 0 { // a chain replaces backoff and max (retry.Policy): they stay unset
		c.RetryBackoffMillis = new(s.RetryBackoffMillis)
		c.MaxRetryBackoffMillis = new(s.MaxRetryBackoffMillis)
	}
	c.DeliveryLimit = new(s.DeliveryLimit)
	c.ImmediateRetryMillis = new(s.ImmediateRetryMillis)
	c.HandlerTimeoutMillis = new(s.HandlerTimeoutMillis)
	c.MaxRedrives = new(s.MaxRedrives)
	c.DLQRetentionHours = new(s.DLQRetentionHours)
	c.BucketMaxLength = new(s.BucketMaxLength)
	c.DLQMaxLength = new(s.DLQMaxLength)
	c.BreakerFailureRatio = new(s.BreakerFailureRatio)
	c.BreakerMinRequests = new(s.BreakerMinRequests)
	c.BreakerWindowMillis = new(s.BreakerWindowMillis)
	c.BreakerCooldownMillis = new(s.BreakerCooldownMillis)
	return c
}

// Policy returns the queue's retry schedule.
func (c QueueConfig) Policy() retry.Policy {
	s := c.Settings()
	return retry.Policy{
		Attempts:         c.RetryAttempts,
		BackoffMillis:    s.RetryBackoffMillis,
		MaxBackoffMillis: s.MaxRetryBackoffMillis,
		JitterRatio:      c.RetryJitterRatio,
		DelaysMillis:     c.RetryDelaysMillis,
	}
}

var queueName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$`)

// Validate reports every problem of c at once, each naming the queue, the
// field, the value and what is allowed. A field set to 0 is judged as
// written (delivery_limit = 0 is refused, max_redrives = 0 is kept); an
// unset (nil) one is judged by its default.
func (c QueueConfig) Validate() error {
	var errs []error
	q := c.Name
	s := c.Settings()
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("%w: queue %q: %s = %v: %s", ErrInvalidConfig, q, field, value, rule))
	}
	if !queueName.MatchString(c.Name) {
		bad("name", fmt.Sprintf("%q", c.Name), "must be 1..200 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	switch c.Transport {
	case TransportSQLite, TransportRabbitMQ, TransportKafka, TransportSQS, TransportPubSub, TransportNATS, TransportAzQueue:
	default:
		bad("transport", fmt.Sprintf("%q", c.Transport), `must be "sqlite", "rabbitmq", "kafka", "sqs", "pubsub", "nats" or "azqueue"`)
	}
	if err := c.Policy().Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("%w: queue %q: %s", ErrInvalidConfig, q, e.Error()))
		}
	} else if err := retry.CheckBuckets(q, c.Policy()); err != nil {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidConfig, err.Error()))
	}
	if s.DeliveryLimit < 1 || s.DeliveryLimit > MaxDeliveryLimit {
		bad("delivery_limit", s.DeliveryLimit, fmt.Sprintf("must be in 1..%d (the hand-overs of one copy before it is dead-lettered)", MaxDeliveryLimit))
	}
	if c.ImmediateRetries < 0 || c.ImmediateRetries > MaxImmediateRetries {
		bad("immediate_retries", c.ImmediateRetries, fmt.Sprintf("must be in 0..%d", MaxImmediateRetries))
	}
	if s.ImmediateRetryMillis < 0 || s.ImmediateRetryMillis > 10000 {
		bad("immediate_retry_millis", s.ImmediateRetryMillis, "must be in 0..10000")
	}
	if s.HandlerTimeoutMillis <= 0 {
		bad("handler_timeout_millis", s.HandlerTimeoutMillis, "must be > 0 (milliseconds)")
	}
	switch c.Ordering {
	case OrderingReorder, OrderingBlock, OrderingPark:
	default:
		bad("ordering", fmt.Sprintf("%q", c.Ordering), `must be "reorder", "block" or "park"`)
	}
	if s.MaxRedrives < 0 || s.MaxRedrives > 100 {
		bad("max_redrives", s.MaxRedrives, "must be in 0..100 (0: every redrive is a manual decision)")
	}
	if s.DLQRetentionHours <= 0 {
		bad("dlq_retention_hours", s.DLQRetentionHours, "must be > 0 (hours)")
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
	if r := c.ExpectedRatePerSecond; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		bad("expected_rate_per_second", r, "must be a finite number >= 0 (messages per second; 0 = unknown)")
	}
	if s.BucketMaxLength < 1 {
		bad("bucket_max_length", s.BucketMaxLength, "must be >= 1 (messages per retry bucket)")
	}
	if s.DLQMaxLength < 1 {
		bad("dlq_max_length", s.DLQMaxLength, "must be >= 1 (messages)")
	}
	if r := s.BreakerFailureRatio; !(r > 0 && r <= 1) {
		bad("breaker_failure_ratio", r, "must be a number in (0, 1]: above 0, at most 1")
	}
	if s.BreakerMinRequests < 1 {
		bad("breaker_min_requests", s.BreakerMinRequests, "must be >= 1")
	}
	if s.BreakerWindowMillis <= 0 {
		bad("breaker_window_millis", s.BreakerWindowMillis, "must be > 0 (milliseconds)")
	}
	if s.BreakerCooldownMillis <= 0 {
		bad("breaker_cooldown_millis", s.BreakerCooldownMillis, "must be > 0 (milliseconds)")
	}
	errs = append(errs, c.validateShareGroup()...)
	errs = append(errs, c.validateClassification()...)
	errs = append(errs, c.validateSchemaVersions()...)
	if ct := c.ContentType; ct != "" && !validContentType(ct) {
		bad("content_type", fmt.Sprintf("%q", ct), `must be "application/json" (or a "+json" type), a "text/..." type or "application/octet-stream"`)
	}
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

// Spec returns the transport-level description of the queue (for
// transport.Declarer): name, exchange, bindings, delivery limit, buckets.
func (c QueueConfig) Spec() transport.QueueSpec {
	s := c.Settings()
	return transport.QueueSpec{
		Name:            c.Name,
		Exchange:        c.Exchange,
		BindingKeys:     c.BindingKeys,
		DeliveryLimit:   s.DeliveryLimit,
		BucketsMillis:   c.Policy().Buckets(),
		BucketMaxLength: s.BucketMaxLength,
		DLQMaxLength:    s.DLQMaxLength,
		ShareGroup:      c.KafkaShareGroup,

		SingleActiveConsumer: c.Ordering == OrderingBlock || c.Ordering == OrderingPark,
	}
}

// validContentType reports whether ct is a content_type a queue may
// declare: JSON (application/json, */*+json), text/* or
// application/octet-stream, optionally with parameters ("; charset=utf-8").
func validContentType(ct string) bool {
	base, _, _ := strings.Cut(strings.ToLower(ct), ";")
	base = strings.TrimSpace(base)
	typ, sub, ok := strings.Cut(base, "/")
	if !ok || typ == "" || sub == "" || strings.ContainsAny(base, " \t") {
		return false
	}
	return base == "application/json" || strings.HasSuffix(sub, "+json") || typ == "text" || base == "application/octet-stream"
}
