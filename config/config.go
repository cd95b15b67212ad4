package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/retry"
)

// ErrInvalidConfig is wrapped by every configuration problem; it is
// lily.ErrInvalidConfig, which QueueConfig.Validate wraps too.
var ErrInvalidConfig = lily.ErrInvalidConfig

// Defaults of Config.
const (
	// DefaultDB is the embedded SQLite database of a configuration that
	// names none.
	DefaultDB = "lily.db"
	// DefaultRabbitMQURL is the broker used when the configuration names
	// none.
	DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"
)

// Config is a Lily configuration file.
type Config struct {
	// DB is the embedded SQLite database file. Defaults to "lily.db".
	DB string `toml:"db" json:"db"`
	// CatalogURL is a PostgreSQL catalog ("postgres://…") shared by a
	// fleet: consumers on many hosts and several 'lily serve' replicas.
	// Empty keeps the catalog in the SQLite file DB. The queues with
	// transport "sqlite" keep their dead letters in DB whatever this says
	// (a dead-lettering there is one SQLite transaction). Defaults to "".
	CatalogURL string `toml:"catalog_url" json:"catalog_url,omitempty"`
	// OutboxURL is the application database whose outbox 'lily relay'
	// publishes (package outbox): a PostgreSQL URL ("postgres://…") or a
	// SQLite file path. Defaults to "" (pass --outbox).
	OutboxURL string `toml:"outbox_url" json:"outbox_url,omitempty"`
	// RabbitMQURL is the broker of the queues with transport "rabbitmq":
	// an amqp:// or amqps:// URL. Defaults to
	// "amqp://guest:guest@127.0.0.1:5672/".
	RabbitMQURL string `toml:"rabbitmq_url" json:"rabbitmq_url,omitempty"`
	// RabbitMQManagementURL is the broker's management API (the
	// management plugin), e.g. "http://rabbit.internal:15672"; the user,
	// password and virtual host are rabbitmq_url's. It counts what
	// consumers of every process hold (reconcile, /healthz). Defaults to
	// port 15672 of rabbitmq_url's host.
	RabbitMQManagementURL string `toml:"rabbitmq_management_url" json:"rabbitmq_management_url,omitempty"`
	// KafkaBrokers are the seed brokers ("host:port") of the queues with
	// transport "kafka"; the --brokers flag overrides them. Defaults to
	// ["127.0.0.1:9092"].
	KafkaBrokers []string `toml:"kafka_brokers" json:"kafka_brokers,omitempty"`
	// KafkaPartitions is the partition count of the topics 'lily topology
	// apply' creates for a kafka queue whose topic does not exist yet,
	// 1..10000; nil means unset (0 is refused, not defaulted). Read it
	// with Partitions. Defaults to 3.
	KafkaPartitions *int32 `toml:"kafka_partitions" json:"kafka_partitions,omitempty"`
	// KafkaDeadLetterTopics maps a kafka queue (topic) to the dead-letter
	// topic Lily writes to and 'lily dlq ingest' reads, when it is not
	// "<queue>.dlt": e.g. one written by Spring Kafka (its
	// DeadLetterPublishingRecoverer's default is "<topic>.DLT", the
	// @RetryableTopic feature's "<topic>-dlt"),
	// Kafka Connect or Kafka Streams. Defaults to none.
	KafkaDeadLetterTopics map[string]string `toml:"kafka_dead_letter_topics" json:"kafka_dead_letter_topics,omitempty"`
	// SQSRegion is the AWS region of the queues with transport "sqs".
	// Defaults to the AWS_REGION environment variable.
	SQSRegion string `toml:"sqs_region" json:"sqs_region,omitempty"`
	// SQSEndpoint is the SQS endpoint URL, e.g. an emulator's
	// "http://127.0.0.1:4100". Defaults to AWS's endpoint for the region.
	SQSEndpoint string `toml:"sqs_endpoint" json:"sqs_endpoint,omitempty"`
	// SQSProtocol is the SQS wire protocol: "json" (AWS since 2023) or
	// "query" (emulators such as goaws that speak only the older Query
	// protocol). Defaults to "json".
	SQSProtocol string `toml:"sqs_protocol" json:"sqs_protocol,omitempty"`
	// SQSQueueURLs maps an sqs queue (or its "<queue>-dlq") to its queue
	// URL, for queues not found by name. Defaults to looking them up.
	SQSQueueURLs map[string]string `toml:"sqs_queue_urls" json:"sqs_queue_urls,omitempty"`
	// SQSVisibilityTimeoutSeconds is the visibility timeout (lease) Lily
	// sets on its SQS queues and receives with, 1..43200; the runtime
	// extends it while a handler runs. nil means unset. Defaults to 30.
	SQSVisibilityTimeoutSeconds *int `toml:"sqs_visibility_timeout_seconds" json:"sqs_visibility_timeout_seconds,omitempty"`
	// KafkaDLTRetentionHours maps a kafka queue to how long its dead-letter
	// topic keeps records (retention.ms, declared by 'lily topology
	// apply'), 1..87600 hours. Defaults to the queue's dlq_retention_hours:
	// a dead letter leaves the topic when the catalog would discard it
	// (kafka_dlt.go).
	KafkaDLTRetentionHours map[string]int `toml:"kafka_dlt_retention_hours" json:"kafka_dlt_retention_hours,omitempty"`
	// KafkaDLTRetentionBytes maps a kafka queue to the most bytes per
	// partition its dead-letter topic keeps (retention.bytes): -1 for no
	// size cap, or at least 1048576. Defaults to -1.
	KafkaDLTRetentionBytes map[string]int64 `toml:"kafka_dlt_retention_bytes" json:"kafka_dlt_retention_bytes,omitempty"`
	// PubSubProject is the Google Cloud project of the queues with
	// transport "pubsub" (config/pubsub.go lists the Pub/Sub settings).
	// Defaults to "".
	PubSubProject string `toml:"pubsub_project" json:"pubsub_project,omitempty"`
	// PubSubEndpoint is host:port of the Pub/Sub API or an emulator.
	// Defaults to Google's.
	PubSubEndpoint string `toml:"pubsub_endpoint" json:"pubsub_endpoint,omitempty"`
	// PubSubInsecure dials pubsub_endpoint in plaintext without
	// credentials (an emulator). Defaults to false.
	PubSubInsecure bool `toml:"pubsub_insecure" json:"pubsub_insecure,omitempty"`
	// PubSubAckDeadlineSeconds is the subscriptions' ack deadline (the
	// lease), 10..600. Defaults to 60.
	PubSubAckDeadlineSeconds *int `toml:"pubsub_ack_deadline_seconds" json:"pubsub_ack_deadline_seconds,omitempty"`
	// PubSubMaxDeliveryAttempts is the dead-letter policy's limit that
	// 'lily topology apply' sets, 5..100, above every pubsub queue's
	// delivery_limit. Defaults to delivery_limit + 2, at least 5.
	PubSubMaxDeliveryAttempts *int `toml:"pubsub_max_delivery_attempts" json:"pubsub_max_delivery_attempts,omitempty"`
	// NATSURL is the NATS server URL (comma-separated for a cluster) of the
	// queues with transport "nats" (config/nats.go lists the NATS
	// settings). Defaults to "nats://127.0.0.1:4222".
	NATSURL string `toml:"nats_url" json:"nats_url,omitempty"`
	// NATSAckWaitSeconds is the AckWait (lease) of the consumers Lily
	// declares, 1..43200; the runtime extends it with InProgress while a
	// handler runs. nil means unset. Defaults to 30.
	NATSAckWaitSeconds *int `toml:"nats_ack_wait_seconds" json:"nats_ack_wait_seconds,omitempty"`
	// NATSRetention is the retention of the streams Lily declares:
	// "workqueue" (an acknowledged message leaves the stream) or "limits"
	// (it stays until the stream's limits remove it). Defaults to
	// "workqueue".
	NATSRetention string `toml:"nats_retention" json:"nats_retention,omitempty"`
	// AzQueueURL is the queue service URL of the queues with transport
	// "azqueue" and of the [[foreign_dlq]] kind = "azure-functions"
	// entries (config/azqueue.go lists the Azure settings), e.g.
	// "https://<account>.queue.core.windows.net/". Defaults to Azurite's
	// "http://127.0.0.1:10001/devstoreaccount1".
	AzQueueURL string `toml:"azqueue_url" json:"azqueue_url,omitempty"`
	// AzQueueAccount is the storage account of the shared-key credential;
	// its key is read from the environment (AZURE_STORAGE_KEY), never from
	// the file. Defaults to Azurite's "devstoreaccount1" (whose published
	// key needs no variable).
	AzQueueAccount string `toml:"azqueue_account" json:"azqueue_account,omitempty"`
	// AzQueueVisibilityTimeoutSeconds is the lease of a received message,
	// 1..604800; the runtime extends it while a handler runs. nil means
	// unset. Defaults to 30.
	AzQueueVisibilityTimeoutSeconds *int `toml:"azqueue_visibility_timeout_seconds" json:"azqueue_visibility_timeout_seconds,omitempty"`
	// NATSQueues adopts an existing stream and consumer for a nats queue
	// (Lily checks them instead of declaring its own). Defaults to none.
	NATSQueues map[string]NATSBinding `toml:"nats_queues" json:"nats_queues,omitempty"`
	// PubSubQueues maps a pubsub queue to its topic and subscription.
	// Defaults to the queue's name for both.
	PubSubQueues map[string]PubSubNames `toml:"pubsub_queues" json:"pubsub_queues,omitempty"`
	// RedactPatterns are extra regular expressions whose matches are masked
	// in error messages and stacks. Defaults to none (the built-in
	// patterns always apply).
	RedactPatterns []string `toml:"redact_patterns" json:"redact_patterns,omitempty"`
	// LedgerHorizonHours is how long the ledger keeps the per-event rows
	// that count each broker message once (docs/ledger.md), 1..87600; nil
	// means unset. Read it with LedgerHorizonHoursValue. Defaults to 720
	// (30 days), or what the queues need if longer (LedgerHorizonFloor);
	// a value shorter than a queue needs is refused.
	LedgerHorizonHours *int `toml:"ledger_horizon_hours" json:"ledger_horizon_hours,omitempty"`
	// Queues are the [[queue]] entries. A configuration without any is
	// valid (the catalog and the console need none), but 'lily lint'
	// reports it. Defaults to none.
	Queues []lily.QueueConfig `toml:"queue" json:"queues"`
	// Tokens are the [[token]] entries: named credentials with a role for
	// the HTTP API and console ('lily serve'). Defaults to none.
	Tokens []TokenConfig `toml:"token" json:"tokens,omitempty"`
	// RedriveRules are the [[redrive_rule]] entries: redrives 'lily serve'
	// starts by itself when their trigger occurs (redrive_rule.go).
	// Defaults to none: rule-driven redrive is off.
	RedriveRules []RedriveRuleConfig `toml:"redrive_rule" json:"redrive_rules,omitempty"`
	// ForeignDLQs are the [[foreign_dlq]] entries: RabbitMQ dead-letter
	// queues other frameworks fill (MassTransit, a dead-letter exchange,
	// NServiceBus), drained and redriven to their origin. Defaults to none.
	ForeignDLQs []ForeignDLQConfig `toml:"foreign_dlq" json:"foreign_dlqs,omitempty"`
	// Lambdas are the [[lambda]] entries: AWS Lambda functions' asynchronous
	// invocation settings, for 'lily lint' (config/lambda.go).
	Lambdas []LambdaConfig `toml:"lambda" json:"lambdas,omitempty"`
}

// WithDefaults returns c with defaults applied to it and every queue.
func (c Config) WithDefaults() Config {
	c.DB = cmp.Or(c.DB, DefaultDB)
	c.RabbitMQURL = cmp.Or(c.RabbitMQURL, DefaultRabbitMQURL)
	c = c.withKafkaDefaults()
	qs := make([]lily.QueueConfig, len(c.Queues))
	for i, q := range c.Queues {
		qs[i] = q.WithDefaults()
	}
	c.Queues = qs
	return c
}

// Validate reports every problem of every queue at once, plus duplicate
// names, a malformed rabbitmq_url, bad redaction patterns, the
// topology-wide bucket limit, the Kafka settings and the problems of the
// [[token]] entries.
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
	if c.RabbitMQURL != "" {
		if err := ValidateRabbitMQURL(c.RabbitMQURL); err != nil {
			errs = append(errs, fmt.Errorf("%w: rabbitmq_url = %q: %v", ErrInvalidConfig, redactURL(c.RabbitMQURL), err))
		}
	}
	if m := c.RabbitMQManagementURL; m != "" && !strings.HasPrefix(m, "http://") && !strings.HasPrefix(m, "https://") {
		errs = append(errs, fmt.Errorf("%w: rabbitmq_management_url = %q: want the management API's http:// or https:// URL, e.g. \"http://127.0.0.1:15672\"",
			ErrInvalidConfig, redactURL(m)))
	}
	if c.CatalogURL != "" && !strings.HasPrefix(c.CatalogURL, "postgres://") && !strings.HasPrefix(c.CatalogURL, "postgresql://") {
		errs = append(errs, fmt.Errorf("%w: catalog_url = %q: want a PostgreSQL URL, e.g. \"postgres://lily@db.internal:5432/lily\" (a SQLite catalog is named by db)",
			ErrInvalidConfig, redactURL(c.CatalogURL)))
	}
	errs = append(errs, c.validateKafka()...)
	errs = append(errs, c.validateSQS()...)
	errs = append(errs, c.validatePubSub()...)
	errs = append(errs, c.validateNATS()...)
	errs = append(errs, c.validateAzQueue()...)
	errs = append(errs, c.validateLambdas()...)
	errs = append(errs, c.validateLedger()...)
	for _, p := range c.RedactPatterns {
		if _, err := evidence.NewRedactor(p); err != nil {
			errs = append(errs, fmt.Errorf("%w: redact_patterns: %q: %v", ErrInvalidConfig, p, err))
		}
	}
	errs = append(errs, c.validateTokens()...)
	errs = append(errs, c.validateRules()...)
	errs = append(errs, c.validateForeign()...)
	return errors.Join(errs...)
}

// Queue returns the queue named name.
func (c Config) Queue(name string) (lily.QueueConfig, bool) {
	for _, q := range c.Queues {
		if q.Name == name {
			return q, true
		}
	}
	return lily.QueueConfig{}, false
}

// ValidateRabbitMQURL checks an AMQP URL as the RabbitMQ client reads it:
// scheme amqp or amqps, a host, and a port in 1..65535 if one is given.
// The error says what is wrong and what a good URL looks like.
func ValidateRabbitMQURL(s string) error {
	const example = `e.g. "amqp://guest:guest@127.0.0.1:5672/" or "amqps://user:pass@rabbit.example.com/vhost"`
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("is not a URL (%v): %s", errors.Unwrap(err), example)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return fmt.Errorf("scheme %q: must be amqp:// or amqps://, %s", u.Scheme, example)
	}
	if u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("has no host: %s", example)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Hostname(), u.Port()
	}
	if host == "" {
		return fmt.Errorf("has no host: %s", example)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q: must be a number in 1..65535, %s", port, example)
		}
	}
	return nil
}

// userinfo matches the password part of a URL that may not parse.
var userinfo = regexp.MustCompile(`(://[^:/@]*:)[^@/]*@`)

// redactURL hides the password of a URL for error messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return userinfo.ReplaceAllString(s, "${1}***@")
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "***")
	}
	return u.String()
}

// unjoin splits an errors.Join result into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ParseConfig decodes a TOML configuration, applies defaults and validates
// it. Unknown fields are errors (a misspelt field would otherwise be a
// silent default); a value of the wrong type is an error naming the TOML
// key, the type wanted, the value given and its line.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, decodeError(data, err)
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
