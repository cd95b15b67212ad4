package lint

import (
	"fmt"
	"math"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/plan"
)

// Codes of the cross-field findings (Static).
const (
	// CodeNoQueues (error): the configuration has no [[queue]] entry.
	CodeNoQueues = "no-queues"
	// CodeHandlerTimeoutOverLease (warning): handler_timeout_millis plus
	// the abandon grace does not end inside the transport's lease.
	CodeHandlerTimeoutOverLease = "handler-timeout-over-lease"
	// CodeRetryCapacityShort (error): buckets × bucket_max_length holds
	// fewer messages than expected_outage × expected_rate_per_second.
	CodeRetryCapacityShort = "retry-capacity-short"
	// CodeBreakerWithoutRetries (warning): breaker = true with
	// retry_attempts = 0.
	CodeBreakerWithoutRetries = "breaker-without-retries"
)

// Leases the handler-timeout-over-lease rule compares with.
const (
	// AbandonGrace is lily.ConsumerOptions.AbandonGrace's default: how long
	// a handler may run past its timeout before the runtime gives up on
	// it and settles the delivery.
	AbandonGrace = time.Second
	// RabbitMQConsumerTimeout is RabbitMQ's default consumer_timeout (30
	// minutes since 3.8.17): a delivery unacknowledged that long closes
	// its channel, and every delivery in flight on it is requeued.
	RabbitMQConsumerTimeout = 30 * time.Minute
)

// noQueues reports CodeNoQueues for a configuration without queues.
func noQueues(cfg config.Config) []Finding {
	if len(cfg.Queues) > 0 {
		return nil
	}
	return []Finding{{
		Severity: Error, Code: CodeNoQueues,
		What: "the configuration has no [[queue]] entry (the file is empty, or declares only other settings)",
		Why: "lint judges the queues of a configuration; without any there is nothing to judge, and a consumer, " +
			"'lily topology' or 'lily alerts' run with this file knows no queue: it is most likely the wrong file, " +
			"or one not written yet",
		Fix: `add one [[queue]] entry per logical queue, at least name = "<queue>" (see examples/lily.toml), or point --config at the file that has them`,
	}}
}

// leaseOf returns the lease a queue's transport gives a delivery, and its
// name for the finding; false if the transport has none Lily knows, or one
// the runtime extends while the handler runs (SQLite: transport.LeaseExtender,
// so a slow handler never outlives its lease there).
func leaseOf(q lily.QueueConfig) (time.Duration, string, bool) {
	switch q.Transport {
	case lily.TransportRabbitMQ:
		return RabbitMQConsumerTimeout, "RabbitMQ's consumer_timeout (default 30 min)", true
	}
	return 0, "", false
}

// crossField returns the findings that compare settings with each other
// or with the transport: handler-timeout-over-lease, retry-capacity-short
// and breaker-without-retries.
func crossField(q lily.QueueConfig) []Finding {
	var out []Finding
	add := func(sev Severity, code, what, why, fix string) {
		out = append(out, Finding{Severity: sev, Queue: q.Name, Code: code, What: what, Why: why, Fix: fix})
	}
	s := q.Settings()
	timeout := time.Duration(s.HandlerTimeoutMillis) * time.Millisecond
	if lease, name, ok := leaseOf(q); ok && timeout+AbandonGrace >= lease {
		fit := lease - AbandonGrace - lease/10
		add(Warning, CodeHandlerTimeoutOverLease,
			fmt.Sprintf("handler_timeout_millis = %d plus the %s abandon grace is %s, not inside %s of %s",
				s.HandlerTimeoutMillis, AbandonGrace, timeout+AbandonGrace, name, lease),
			"the lease runs out while a slow handler still runs: the transport hands the message to another consumer, "+
				"so it is processed twice at once, its delivery count rises although it never crashed, and a message that is "+
				"merely slow reaches delivery_limit and is dead-lettered; the first consumer's settlement then fails "+
				"(its lease is lost)",
			fmt.Sprintf("lower handler_timeout_millis to at most %d, so that timeout and grace end well inside the lease, "+
				"or lengthen the lease (SQLite: sqlite.Options.VisibilityTimeout; RabbitMQ: consumer_timeout)", fit.Milliseconds()))
	}

	if outage := q.ExpectedOutageDuration(); outage > 0 && q.ExpectedRatePerSecond > 0 && q.Transport == lily.TransportRabbitMQ {
		buckets := len(q.Policy().Buckets())
		capacity := float64(buckets) * float64(s.BucketMaxLength)
		demand := outage.Seconds() * q.ExpectedRatePerSecond
		if buckets > 0 && demand > capacity {
			need := int64(math.Ceil(demand / float64(buckets)))
			add(Error, CodeRetryCapacityShort,
				fmt.Sprintf("its %d retry buckets × bucket_max_length = %d hold %s messages, fewer than expected_outage = %q × "+
					"expected_rate_per_second = %s = %s", buckets, s.BucketMaxLength, plan.FormatNumber(capacity),
					q.ExpectedOutage, plan.FormatNumber(q.ExpectedRatePerSecond), plan.FormatNumber(demand)),
				"during the outage every message fails and waits in a retry bucket; a full bucket refuses the hand-off "+
					"(reject-publish), so the message is released instead, its delivery count rises with each refusal, and at "+
					"delivery_limit it is dead-lettered although its retries were never spent: retry retention must count "+
					"buckets × capacity",
				fmt.Sprintf("raise bucket_max_length to at least %d (each bucket is a quorum queue: check the broker's disk and "+
					"memory for it), or pause consumption while the dependency is down (the circuit breaker) so that messages "+
					"wait at the source instead", need))
		}
	}

	if q.Breaker != nil && *q.Breaker && q.RetryAttempts == 0 {
		add(Warning, CodeBreakerWithoutRetries, "breaker = true with retry_attempts = 0: the breaker has no bucket to hold failures in",
			fmt.Sprintf("while the breaker is open, a failure of a delivery in flight waits in a retry bucket without spending "+
				"a retry; with retry_attempts = 0 there is no bucket, so the runtime releases the delivery instead (delayed by "+
				"breaker_cooldown_millis where the transport can): each release raises its delivery count, and after "+
				"delivery_limit = %d releases the message is dead-lettered as delivery_limit, so an outage still becomes dead "+
				"letters, only later", s.DeliveryLimit),
			"set retry_attempts (e.g. 3), which gives the breaker buckets to hold failures in; or remove breaker = true if "+
				"every failure of this queue is permanent")
	}
	return out
}
