package config

import (
	"fmt"

	"github.com/lily-mq/lily"
)

// Limits of the dead-letter topic's retention settings.
const (
	// MaxKafkaDLTRetentionHours is the longest kafka_dlt_retention_hours:
	// ten years, as dlq_retention_hours allows.
	MaxKafkaDLTRetentionHours = 87600
	// MinKafkaDLTRetentionBytes is the smallest size cap: below a
	// megabyte a partition could not hold one segment of dead letters.
	MinKafkaDLTRetentionBytes = 1 << 20
)

// KafkaDLTRetention returns how long (hours) and how much (bytes per
// partition, -1: no cap) the dead-letter topic of queue keeps: the
// kafka_dlt_retention_hours and kafka_dlt_retention_bytes entries, else
// the queue's dlq_retention_hours and no size cap.
func (c Config) KafkaDLTRetention(queue string) (hours int, bytes int64) {
	hours, bytes = c.KafkaDLTRetentionHours[queue], c.KafkaDLTRetentionBytes[queue]
	if hours == 0 {
		q, ok := c.Queue(queue)
		if !ok {
			q = lily.QueueConfig{Name: queue}
		}
		hours = q.WithDefaults().Settings().DLQRetentionHours
	}
	if bytes == 0 {
		bytes = -1
	}
	return hours, bytes
}

// validateKafkaDLT reports every problem of kafka_dlt_retention_hours and
// kafka_dlt_retention_bytes, each naming the entry, the value and the fix.
func (c Config) validateKafkaDLT() []error {
	var errs []error
	kafkaQueue := func(setting, q string) bool {
		qc, ok := c.Queue(q)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w: %s: %q: no [[queue]] has this name (add one with transport = \"kafka\", or remove the entry)", ErrInvalidConfig, setting, q))
		case qc.Transport != lily.TransportKafka:
			errs = append(errs, fmt.Errorf("%w: %s: %q: the queue's transport is %q; only a queue with transport = \"kafka\" has a dead-letter topic", ErrInvalidConfig, setting, q, qc.Transport))
		default:
			return true
		}
		return false
	}
	for q, h := range c.KafkaDLTRetentionHours {
		if !kafkaQueue("kafka_dlt_retention_hours", q) {
			continue
		}
		if h < 1 || h > MaxKafkaDLTRetentionHours {
			errs = append(errs, fmt.Errorf("%w: kafka_dlt_retention_hours: %q = %d: must be in 1..%d hours (a dead-letter topic that keeps records forever outlives "+
				"the catalog's retention: erased and discarded data would live on in it); leave it out to keep them as long as dlq_retention_hours",
				ErrInvalidConfig, q, h, MaxKafkaDLTRetentionHours))
		}
	}
	for q, b := range c.KafkaDLTRetentionBytes {
		if !kafkaQueue("kafka_dlt_retention_bytes", q) {
			continue
		}
		if b != -1 && b < MinKafkaDLTRetentionBytes {
			errs = append(errs, fmt.Errorf("%w: kafka_dlt_retention_bytes: %q = %d: must be -1 (no size cap) or at least %d bytes per partition",
				ErrInvalidConfig, q, b, MinKafkaDLTRetentionBytes))
		}
	}
	return errs
}
