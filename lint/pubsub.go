package lint

import (
	"fmt"
	"strings"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// Codes of the Pub/Sub findings.
const (
	// CodePubSubMaxAttempts (error): the dead-letter policy's
	// max_delivery_attempts is not above delivery_limit, so the service
	// forwards a crash-type poison before Lily can dead-letter it with
	// evidence. Warning when it is exactly delivery_limit + 1 (no margin
	// for a failed dead-letter publish).
	CodePubSubMaxAttempts = "pubsub-max-attempts"
	// CodePubSubRetryRounded (info): a retry delay above 1 s that is not
	// whole seconds waits up to a second longer (ack deadlines are whole
	// seconds).
	CodePubSubRetryRounded = "pubsub-retry-rounded"
	// CodePubSubRetryHops (info): a retry delay above 600 s is held in
	// hops of at most 10 minutes (the longest ack deadline).
	CodePubSubRetryHops = "pubsub-retry-hops"
	// CodePubSubRetryRetention (error): a retry delay longer than the 7
	// days a subscription keeps an unacknowledged message: the retry copy
	// expires in its delay subscription, lost.
	CodePubSubRetryRetention = "pubsub-retry-retention"
	// CodePubSubRetryNeedsConsumer (info): retry copies are moved back by
	// the queue's consumers; with none running, due retries wait.
	CodePubSubRetryNeedsConsumer = "pubsub-retry-needs-consumer"
)

const pubsubRetention = 7 * 24 * 3600 * 1000 // ms

// pubsubFindings returns the findings of the queues with transport
// "pubsub": where Pub/Sub's lack of a per-message delay (docs/design.md §1.3) and
// its dead-letter policy bite.
func pubsubFindings(cfg config.Config) []Finding {
	var out []Finding
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportPubSub {
			continue
		}
		out = append(out, pubsubQueue(cfg, q)...)
	}
	return out
}

func pubsubQueue(cfg config.Config, q lily.QueueConfig) []Finding {
	var out []Finding
	add := func(sev Severity, code, what, why, fix string) {
		out = append(out, Finding{Severity: sev, Queue: q.Name, Code: code, What: what, Why: why, Fix: fix})
	}
	limit := q.Settings().DeliveryLimit
	n := cfg.PubSubMaxAttempts(limit)
	switch {
	case n <= limit:
		add(Error, CodePubSubMaxAttempts, fmt.Sprintf("max_delivery_attempts %d is not above delivery_limit %d", n, limit),
			"the subscription's dead-letter policy forwards a message after max_delivery_attempts deliveries, with no Lily evidence "+
				"(no error, no consumer, only the attempt count), before Lily dead-letters it at delivery_limit",
			fmt.Sprintf("set pubsub_max_delivery_attempts to at least %d (at most 100), or lower delivery_limit", limit+2))
	case n == limit+1:
		add(Warning, CodePubSubMaxAttempts, fmt.Sprintf("max_delivery_attempts %d is delivery_limit %d + 1: no margin", n, limit),
			"Lily dead-letters on the last delivery the service allows; if that dead-letter publish fails, the message is given back "+
				"and the service forwards it without Lily's evidence",
			fmt.Sprintf("set pubsub_max_delivery_attempts to %d or more (leave it unset for delivery_limit + 2)", limit+2))
	}
	bs := q.Policy().Buckets()
	var rounded, hops, expire []string
	for _, ms := range bs {
		switch {
		case ms > pubsubRetention:
			expire = append(expire, fmt.Sprintf("%dms", ms))
		case ms > 600_000:
			hops = append(hops, fmt.Sprintf("%dms", ms))
		}
		if ms > 1000 && ms%1000 != 0 {
			rounded = append(rounded, fmt.Sprintf("%dms", ms))
		}
	}
	if len(expire) > 0 {
		add(Error, CodePubSubRetryRetention, "retry delays "+strings.Join(expire, ", ")+" are longer than 7 days",
			"Pub/Sub has no per-message delay: a retry copy waits unacknowledged in its delay subscription, which keeps a message "+
				"at most 7 days (message_retention_duration); a longer wait expires the copy — the message is lost",
			"keep max_retry_backoff_millis (and every retry_delays_millis entry) at or below 604800000")
	}
	if len(hops) > 0 {
		add(Info, CodePubSubRetryHops, "retry delays "+strings.Join(hops, ", ")+" are longer than 600 s",
			"the longest ack deadline is 600 s, so the copy is handed back to a consumer every 10 minutes and hidden again "+
				"(ModifyAckDeadline) until due: no handler and no delivery attempt of the queue is spent, but each hop is an API call",
			"nothing to do if the delay is meant; shorter delays need no hops")
	}
	if len(rounded) > 0 {
		add(Info, CodePubSubRetryRounded, "retry delays "+strings.Join(rounded, ", ")+" are not whole seconds",
			"a retry copy due in more than a second is hidden with an ack deadline in whole seconds, so it comes back up to a "+
				"second late (delays up to 1 s are held in the consumer, to the poll interval)",
			"use delays in whole seconds, or accept the rounding")
	}
	if len(bs) > 0 {
		add(Info, CodePubSubRetryNeedsConsumer, "retries wait in delay subscriptions and are moved back by the queue's consumers",
			"Pub/Sub cannot delay one message, so a retry is a copy in <subscription>.retry.<ms>ms that a running consumer of the "+
				"queue forwards, when due, to <subscription>.retry (only this subscription reads it, so the topic's other "+
				"subscribers never see a retry); with no consumer running, due retries wait there — lag, not loss",
			"run at least one consumer of the queue whenever retries are pending; alert on the delay subscriptions' "+
				"oldest_unacked_message_age beyond the longest delay")
	}
	return out
}
