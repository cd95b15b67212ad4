package config

import (
	"fmt"
	"strings"
	"time"
)

// Kinds of [[foreign_dlq]]: the framework that fills the queue.
const (
	// ForeignMassTransit: MassTransit's <queue>_error or <queue>_skipped.
	ForeignMassTransit = "masstransit"
	// ForeignXDeath: a queue fed by a RabbitMQ dead-letter exchange.
	ForeignXDeath = "x-death"
	// ForeignNServiceBus: NServiceBus's error queue.
	ForeignNServiceBus = "nservicebus"
	// ForeignJetStream: the messages a NATS JetStream consumer gave up on
	// (MaxDeliver reached, or terminated), from the server's advisories.
	ForeignJetStream = "jetstream"
	// ForeignAzureFunctions: the poison queue "<queue>-poison" that Azure
	// Functions' queue trigger moves a message to after maxDequeueCount
	// dequeues.
	ForeignAzureFunctions = "azure-functions"
	// ForeignLambdaDestination: an SQS queue that is the on-failure
	// destination of a Lambda function's asynchronous invocations.
	ForeignLambdaDestination = "lambda-destination"
)

// ForeignDLQConfig is a [[foreign_dlq]] entry: a RabbitMQ dead-letter queue
// another framework fills, or a NATS JetStream consumer that is not Lily's,
// which 'lily dlq ingest' drains into the catalog and 'lily dlq redrive'
// sends back to each message's origin queue (to the consumer alone).
type ForeignDLQConfig struct {
	// Queue is the RabbitMQ queue's name, e.g. "orders_error"; for kind
	// "jetstream", the name its dead letters have in the catalog, e.g.
	// "orders.billing"; for kind "azure-functions", the Storage queue
	// that triggers the function, e.g. "orders" (Lily drains
	// "orders-poison"); for kind "lambda-destination", the SQS queue
	// that is a Lambda function's on-failure destination. Required.
	Queue string `toml:"queue" json:"queue"`
	// Kind is who fills it: "masstransit" (origin MT-Fault-InputAddress;
	// a queue named *_skipped is ingested with reason "skipped"),
	// "x-death" (origin x-first-death-queue), "nservicebus" (origin
	// NServiceBus.FailedQ) or "jetstream" (a JetStream consumer's
	// MAX_DELIVERIES and MSG_TERMINATED advisories). Required.
	Kind string `toml:"kind" json:"kind"`
	// Stream and Consumer name the JetStream consumer of kind "jetstream".
	// Required with it, refused with the other kinds.
	Stream   string `toml:"stream" json:"stream,omitempty"`
	Consumer string `toml:"consumer" json:"consumer,omitempty"`
	// RedriveSubject, with kind "jetstream", is where a redrive publishes:
	// a subject of the stream that the consumer alone reads. Defaults to
	// each message's own subject (a redrive refuses one that other
	// consumers of the stream read too).
	RedriveSubject string `toml:"redrive_subject" json:"redrive_subject,omitempty"`
	// MaxDequeueCount, with kind "azure-functions", is the Functions app's
	// maxDequeueCount (host.json extensions.queues): the evidence's
	// delivery count, and what 'lily lint' weighs. Defaults to 5,
	// Functions' own default.
	MaxDequeueCount int `toml:"max_dequeue_count" json:"max_dequeue_count,omitempty"`
	// VisibilityTimeoutSeconds, with kind "azure-functions", is the
	// function app's visibilityTimeout (host.json extensions.queues): the
	// wait before a failed message is tried again. Defaults to 0,
	// Functions' default (at once). 'lily lint' weighs it.
	VisibilityTimeoutSeconds int `toml:"visibility_timeout_seconds" json:"visibility_timeout_seconds,omitempty"`
	// ExpectedOutage, with kind "azure-functions", is the longest
	// dependency outage the function's retries must ride out, a Go
	// duration ("10m"); 'lily lint' compares it with the retry span.
	// Defaults to "" (not checked).
	ExpectedOutage string `toml:"expected_outage" json:"expected_outage,omitempty"`
	// Owner is the team that owns the queue's dead letters. Defaults to "".
	Owner string `toml:"owner" json:"owner,omitempty"`
}

// Reason is the reason the catalog gives the queue's dead letters: "skipped"
// for MassTransit's _skipped queue, else "" (decided from the evidence).
func (f ForeignDLQConfig) Reason() string {
	if f.Kind == ForeignMassTransit && strings.HasSuffix(f.Queue, "_skipped") {
		return "skipped"
	}
	return ""
}

// ForeignDLQ returns the [[foreign_dlq]] entry of queue.
func (c Config) ForeignDLQ(queue string) (ForeignDLQConfig, bool) {
	for _, f := range c.ForeignDLQs {
		if f.Queue == queue {
			return f, true
		}
	}
	return ForeignDLQConfig{}, false
}

// validateForeign reports the problems of the [[foreign_dlq]] entries.
func (c Config) validateForeign() []error {
	var errs []error
	seen := map[string]bool{}
	for i, f := range c.ForeignDLQs {
		where := fmt.Sprintf("[[foreign_dlq]] #%d", i+1)
		if f.Queue != "" {
			where = fmt.Sprintf("[[foreign_dlq]] queue = %q", f.Queue)
		}
		switch {
		case strings.TrimSpace(f.Queue) == "":
			errs = append(errs, fmt.Errorf("%w: %s: queue is required: the RabbitMQ queue's name, e.g. \"orders_error\"", ErrInvalidConfig, where))
		case seen[f.Queue]:
			errs = append(errs, fmt.Errorf("%w: %s is declared twice: names must be unique", ErrInvalidConfig, where))
		default:
			if _, ok := c.Queue(f.Queue); ok {
				errs = append(errs, fmt.Errorf("%w: %s is also a [[queue]]: a foreign dead-letter queue is another framework's, not one Lily consumes", ErrInvalidConfig, where))
			}
		}
		seen[f.Queue] = true
		switch f.Kind {
		case ForeignMassTransit, ForeignXDeath, ForeignNServiceBus:
			if f.Stream != "" || f.Consumer != "" || f.RedriveSubject != "" {
				errs = append(errs, fmt.Errorf("%w: %s: stream, consumer and redrive_subject are for kind = \"jetstream\" only", ErrInvalidConfig, where))
			}
		case ForeignLambdaDestination:
			if f.Stream != "" || f.Consumer != "" || f.RedriveSubject != "" || f.MaxDequeueCount != 0 || f.VisibilityTimeoutSeconds != 0 || f.ExpectedOutage != "" {
				errs = append(errs, fmt.Errorf("%w: %s: kind = \"lambda-destination\" takes queue (the SQS queue's name) and owner only", ErrInvalidConfig, where))
			}
		case ForeignAzureFunctions:
			if f.Stream != "" || f.Consumer != "" || f.RedriveSubject != "" {
				errs = append(errs, fmt.Errorf("%w: %s: stream, consumer and redrive_subject are for kind = \"jetstream\" only", ErrInvalidConfig, where))
			}
			if f.Queue != "" && !storageQueueName.MatchString(f.Queue+"-poison") {
				errs = append(errs, fmt.Errorf("%w: %s: kind = \"azure-functions\" needs the Storage queue name the function's trigger reads: 3..56 lower-case letters, digits and single '-' (its poison queue %q must be a valid name too)", ErrInvalidConfig, where, f.Queue+"-poison"))
			}
			if f.VisibilityTimeoutSeconds < 0 || f.VisibilityTimeoutSeconds > 604800 {
				errs = append(errs, fmt.Errorf("%w: %s: visibility_timeout_seconds = %d: must be 0..604800 (host.json visibilityTimeout, up to 7 days)", ErrInvalidConfig, where, f.VisibilityTimeoutSeconds))
			}
			if f.ExpectedOutage != "" {
				if d, err := time.ParseDuration(f.ExpectedOutage); err != nil || d <= 0 {
					errs = append(errs, fmt.Errorf("%w: %s: expected_outage = %q: want a positive Go duration such as \"10m\"", ErrInvalidConfig, where, f.ExpectedOutage))
				}
			}
			if f.MaxDequeueCount < 0 {
				errs = append(errs, fmt.Errorf("%w: %s: max_dequeue_count = %d: must be >= 1 (the function app's host.json extensions.queues.maxDequeueCount; default 5)", ErrInvalidConfig, where, f.MaxDequeueCount))
			}
		case ForeignJetStream:
			if strings.TrimSpace(f.Stream) == "" || strings.TrimSpace(f.Consumer) == "" {
				errs = append(errs, fmt.Errorf("%w: %s: kind = \"jetstream\" needs stream and consumer: the JetStream stream and the durable consumer whose failed messages Lily takes in", ErrInvalidConfig, where))
			} else if strings.ContainsAny(f.Stream+f.Consumer, ".*> \t") {
				errs = append(errs, fmt.Errorf("%w: %s: stream %q, consumer %q: JetStream names have no dots, wildcards or blanks", ErrInvalidConfig, where, f.Stream, f.Consumer))
			}
		case "":
			errs = append(errs, fmt.Errorf("%w: %s: kind is required: \"masstransit\", \"x-death\", \"nservicebus\", \"jetstream\", \"azure-functions\" or \"lambda-destination\"", ErrInvalidConfig, where))
		default:
			errs = append(errs, fmt.Errorf("%w: %s: kind = %q: want \"masstransit\", \"x-death\", \"nservicebus\", \"jetstream\", \"azure-functions\" or \"lambda-destination\"", ErrInvalidConfig, where, f.Kind))
		}
	}
	return errs
}
