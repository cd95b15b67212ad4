package config

import (
	"fmt"
	"strings"
)

// Kinds of [[foreign_dlq]]: the framework that fills the queue.
const (
	// ForeignMassTransit: MassTransit's <queue>_error or <queue>_skipped.
	ForeignMassTransit = "masstransit"
	// ForeignXDeath: a queue fed by a RabbitMQ dead-letter exchange.
	ForeignXDeath = "x-death"
	// ForeignNServiceBus: NServiceBus's error queue.
	ForeignNServiceBus = "nservicebus"
)

// ForeignDLQConfig is a [[foreign_dlq]] entry: a RabbitMQ dead-letter queue
// another framework fills, which 'lily dlq ingest' drains into the catalog
// and 'lily dlq redrive' sends back to each message's origin queue.
type ForeignDLQConfig struct {
	// Queue is the RabbitMQ queue's name, e.g. "orders_error". Required.
	Queue string `toml:"queue" json:"queue"`
	// Kind is who fills it: "masstransit" (origin MT-Fault-InputAddress;
	// a queue named *_skipped is ingested with reason "skipped"),
	// "x-death" (origin x-first-death-queue) or "nservicebus" (origin
	// NServiceBus.FailedQ). Required.
	Kind string `toml:"kind" json:"kind"`
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
		case "":
			errs = append(errs, fmt.Errorf("%w: %s: kind is required: \"masstransit\", \"x-death\" or \"nservicebus\"", ErrInvalidConfig, where))
		default:
			errs = append(errs, fmt.Errorf("%w: %s: kind = %q: want \"masstransit\", \"x-death\" or \"nservicebus\"", ErrInvalidConfig, where, f.Kind))
		}
	}
	return errs
}
