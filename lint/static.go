package lint

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/plan"
	"github.com/lily-mq/lily/retry"
)

// Codes of the static findings (Static).
const (
	// CodeNoRetries (warning): retry_attempts = 0.
	CodeNoRetries = "no-retries"
	// CodeDeliveryLimitHigh (warning): delivery_limit above 20.
	CodeDeliveryLimitHigh = "delivery-limit-high"
	// CodeDeliveryLimitOne (warning): delivery_limit = 1.
	CodeDeliveryLimitOne = "delivery-limit-one"
	// CodeRetrySpanShort (error): the retry span is shorter than
	// expected_outage.
	CodeRetrySpanShort = "retry-span-short"
	// CodeDLQRetentionBelowSource (error): dlq_retention_hours is shorter
	// than source_retention_hours.
	CodeDLQRetentionBelowSource = "dlq-retention-below-source"
	// CodeDLQRetentionBelowTriage (error): dlq_retention_hours is shorter
	// than twice triage_hours.
	CodeDLQRetentionBelowTriage = "dlq-retention-below-triage"
	// CodeJitterWithoutRetries (info): retry_jitter_ratio > 0 with
	// retry_attempts = 0.
	CodeJitterWithoutRetries = "jitter-without-retries"
	// CodeBucketsNearLimit (warning): a queue needs at least
	// BucketsNearLimit of its retry.MaxBucketsPerQueue buckets.
	CodeBucketsNearLimit = "buckets-near-limit"
	// CodeTopologyBucketsNearLimit (warning): all queues together need at
	// least TopologyBucketsNearLimit of retry.MaxBucketsPerTopology.
	CodeTopologyBucketsNearLimit = "topology-buckets-near-limit"
	// CodeRetriesShareCap (info): two or more retries wait exactly
	// max_retry_backoff_millis.
	CodeRetriesShareCap = "retries-share-cap"
	// CodeParkNeedsKeys (info): ordering = "park".
	CodeParkNeedsKeys = "park-needs-keys"
	// CodeBlockHoldsPartition (info): ordering = "block" on Kafka.
	CodeBlockHoldsPartition = "block-holds-partition"
	// CodeNATSOrderedOneInFlight (info): ordering = "park" or "block" on
	// NATS JetStream.
	CodeNATSOrderedOneInFlight = "nats-ordered-one-in-flight"
	// CodeNoOwner (warning): owner is empty.
	CodeNoOwner = "no-owner"
)

// Thresholds of the static findings.
const (
	// MaxSensibleDeliveryLimit is the largest delivery_limit that draws no
	// warning: RabbitMQ 4.0's default for quorum queues.
	MaxSensibleDeliveryLimit = 20
	// BucketsNearLimit is the bucket count of one queue (of
	// retry.MaxBucketsPerQueue = 32) from which CodeBucketsNearLimit fires.
	BucketsNearLimit = 24
	// TopologyBucketsNearLimit is the total bucket count (of
	// retry.MaxBucketsPerTopology = 4096) from which
	// CodeTopologyBucketsNearLimit fires.
	TopologyBucketsNearLimit = 3072
)

// Static returns the findings that the configuration alone shows, in
// configuration order. It applies defaults (config.Config.WithDefaults) and
// expects a configuration that Validate accepts, as config.LoadConfig
// returns; it reads nothing and never fails.
//
// Rules, per queue:
//
//   - no-retries (warning): retry_attempts = 0, so a transient error
//     dead-letters on its first failure (immediate_retries, if any, only
//     cover a few hundred milliseconds).
//   - delivery-limit-high (warning): delivery_limit > 20; a crash-type
//     poison message is handed out that many times, one crash each.
//     delivery_limit always has a value (default 5), so "no delivery
//     limit" cannot happen in a configuration; CheckBroker reports a live
//     main queue without x-delivery-limit.
//   - delivery-limit-one (warning): delivery_limit = 1; one crash, release
//     or lost connection dead-letters the message and every innocent
//     neighbour in flight with it.
//   - retry-span-short (error): expected_outage is set and longer than the
//     retry span (the sum of the nominal delays, as 'lily plan outage
//     --backoff-millis' computes it; immediate retries and jitter are
//     ignored); the finding quotes plan.Outage's dead-lettered figure per
//     message/s of traffic.
//   - dlq-retention-below-source (error): source_retention_hours is set and
//     dlq_retention_hours is not longer (equal is not enough: a message
//     that waited at the source before it was dead-lettered would expire
//     sooner in the DLQ than it would have unconsumed).
//   - dlq-retention-below-triage (error): triage_hours is set and
//     dlq_retention_hours is shorter than twice it.
//   - jitter-without-retries (info): retry_jitter_ratio > 0 with
//     retry_attempts = 0 has no effect.
//   - buckets-near-limit (warning): the queue needs BucketsNearLimit (24)
//     or more of its 32 buckets.
//   - retries-share-cap (info): two or more retries wait exactly
//     max_retry_backoff_millis (retry_backoff_millis·2^(A−1) exceeds the
//     cap), so the tail of the schedule is a fixed interval.
//   - park-needs-keys (info): ordering = "park". Keys are per message
//     (Message.Key), not per queue, so the configuration cannot show
//     whether the queue's messages carry them; the finding reminds that
//     park only orders messages that do.
//   - block-holds-partition (info): ordering = "block" on Kafka holds the
//     head's whole partition.
//   - nats-ordered-one-in-flight (info): ordering = "park" or "block" on
//     NATS: the consumer hands out one message at a time (MaxAckPending
//     1), and a retry waits out its delay at the head of the queue.
//   - no-owner (warning): owner is empty.
//   - handler-timeout-over-lease (warning): handler_timeout_millis plus
//     AbandonGrace (1 s) does not end inside the transport's lease
//     (RabbitMQConsumerTimeout, 30 min; SQLite extends its lease while
//     the handler runs and Kafka has none): the message is handed out
//     again while the handler runs.
//   - retry-capacity-short (error): on RabbitMQ, with expected_outage and
//     expected_rate_per_second set, buckets × bucket_max_length is less
//     than outage × rate: full buckets refuse hand-offs, and refused
//     messages reach delivery_limit.
//   - breaker-without-retries (warning): breaker = true with
//     retry_attempts = 0: the breaker's hold has no bucket and falls back
//     to releases, which raise the delivery count.
//   - share-delivery-limit (error; lint/kafka_share.go): a kafka queue
//     with kafka_share_group whose delivery_limit is not below Kafka's
//     default share-group delivery limit (5): the broker archives a
//     crash-type poison record, silently, before Lily dead-letters it.
//     KafkaShareLive judges it against the cluster's real limit.
//
// And for the whole configuration: no-queues (error), no [[queue]] at all
// (an empty file, or only other settings); topology-buckets-near-limit
// (warning), all queues together need TopologyBucketsNearLimit (3072) or
// more of the 4096 buckets.
func Static(cfg config.Config) []Finding {
	cfg = cfg.WithDefaults()
	out := noQueues(cfg)
	total := 0
	for _, q := range cfg.Queues {
		out = append(out, staticQueue(q)...)
		out = append(out, staticSQS(cfg, q)...)
		total += len(q.Policy().Buckets())
	}
	out = append(out, kafkaDLTStatic(cfg)...)
	out = append(out, kafkaShareStatic(cfg)...)
	out = append(out, pubsubFindings(cfg)...)
	out = append(out, functionsFindings(cfg)...)
	out = append(out, lambdaFindings(cfg)...)
	if total >= TopologyBucketsNearLimit {
		out = append(out, Finding{
			Severity: Warning, Code: CodeTopologyBucketsNearLimit,
			What: fmt.Sprintf("the %d queues need %d retry buckets in all, of the %d a topology may have",
				len(cfg.Queues), total, retry.MaxBucketsPerTopology),
			Why: "every bucket is a physical queue or topic on the broker; near the limit, adding a queue or a retry makes " +
				"the configuration invalid and every consumer of it refuses to start, so messages wait unprocessed",
			Fix: "lower retry_attempts, retry_jitter_ratio or max_retry_backoff_millis on the queues with the most buckets " +
				"('lily schedule' shows a policy's buckets), or split the queues over several configurations and brokers",
		})
	}
	return out
}

// staticQueue returns the static findings of one queue.
func staticQueue(q lily.QueueConfig) []Finding {
	s := q.Settings()
	var out []Finding
	add := func(sev Severity, code, what, why, fix string) {
		out = append(out, Finding{Severity: sev, Queue: q.Name, Code: code, What: what, Why: why, Fix: fix})
	}
	p := q.Policy()

	if q.RetryAttempts == 0 {
		why := "a transient error (a timeout, throttling, a dropped connection, a deploy) is not retried: the message goes " +
			"straight to the dead-letter queue and waits there until someone redrives it, so a one-second blip at " +
			"N messages/s dead-letters N healthy messages"
		if q.ImmediateRetries > 0 {
			why += fmt.Sprintf("; immediate_retries = %d only covers blips shorter than about %d ms",
				q.ImmediateRetries, int64(q.ImmediateRetries)*s.ImmediateRetryMillis)
		}
		add(Warning, CodeNoRetries, "retry_attempts = 0: a transient error dead-letters on its first failure", why,
			"set retry_attempts, e.g. 3 (delays 1 s, 2 s, 4 s with the default backoff; 'lily schedule --attempts 3' shows them); "+
				"keep 0 only if every failure of this queue is permanent")
	}

	switch {
	case s.DeliveryLimit > MaxSensibleDeliveryLimit:
		add(Warning, CodeDeliveryLimitHigh,
			fmt.Sprintf("delivery_limit = %d is above %d", s.DeliveryLimit, MaxSensibleDeliveryLimit),
			fmt.Sprintf("a crash-type poison message (one that kills the process before the handler returns) is handed out %d times "+
				"before it is dead-lettered: %d crashes and restarts, each returning the whole prefetch window or leased batch "+
				"with it; redeliveries are not retries, transient errors are counted by retry_attempts", s.DeliveryLimit, s.DeliveryLimit),
			fmt.Sprintf("lower delivery_limit to %d (the default) or at most %d; raise retry_attempts instead if transient errors need more attempts",
				lily.DefaultDeliveryLimit, MaxSensibleDeliveryLimit))
	case s.DeliveryLimit == 1:
		add(Warning, CodeDeliveryLimitOne, "delivery_limit = 1: one redelivery dead-letters a message",
			"one crash, scale-in, lost connection or released delivery (handler_timeout_millis) dead-letters the message, "+
				"and every innocent message in flight with a crashed process (the prefetch window, the leased batch) is "+
				"dead-lettered with it: Lily's cautious one-at-a-time mode after a crash needs a second delivery to work",
			fmt.Sprintf("set delivery_limit to at least 2; the default is %d", lily.DefaultDeliveryLimit))
	}

	if f, ok := retrySpanShort(q); ok {
		out = append(out, f)
	}

	if q.SourceRetentionHours > 0 && s.DLQRetentionHours <= q.SourceRetentionHours {
		add(Error, CodeDLQRetentionBelowSource,
			fmt.Sprintf("dlq_retention_hours = %d is not longer than source_retention_hours = %d", s.DLQRetentionHours, q.SourceRetentionHours),
			"a dead letter is kept no longer than the source would have kept the message unconsumed, so dead-lettering "+
				"shortens its life: it is discarded (with a record, but without its body) before a message that was never "+
				"processed would have expired; where the clock keeps the original enqueue time (SQS standard queues) a message "+
				"that waited at the source is discarded sooner still",
			fmt.Sprintf("set dlq_retention_hours longer than %d, better twice that (%d)", q.SourceRetentionHours, 2*q.SourceRetentionHours))
	}
	if q.TriageHours > 0 && s.DLQRetentionHours < 2*q.TriageHours {
		add(Error, CodeDLQRetentionBelowTriage,
			fmt.Sprintf("dlq_retention_hours = %d is shorter than twice triage_hours = %d (%d h)", s.DLQRetentionHours, q.TriageHours, 2*q.TriageHours),
			"dead letters are discarded at dlq_retention_hours; with less than twice the triage time, the alarm at half the "+
				"retention leaves the owner less than one triage time, and an entry that waits through a weekend or an incident "+
				"backlog is discarded before anyone decides about it: its body is gone",
			fmt.Sprintf("set dlq_retention_hours to at least %d, or shorten triage_hours", 2*q.TriageHours))
	}

	if q.RetryJitterRatio > 0 && q.RetryAttempts == 0 {
		add(Info, CodeJitterWithoutRetries,
			fmt.Sprintf("retry_jitter_ratio = %s has no effect with retry_attempts = 0", strconv.FormatFloat(q.RetryJitterRatio, 'g', -1, 64)),
			"jitter spreads retries over several delay buckets; without retries there is nothing to spread, which suggests "+
				"the queue was meant to retry",
			"set retry_attempts, or remove retry_jitter_ratio")
	}

	if n := len(p.Buckets()); n >= BucketsNearLimit {
		add(Warning, CodeBucketsNearLimit,
			fmt.Sprintf("the queue needs %d retry buckets, of the %d allowed per queue", n, retry.MaxBucketsPerQueue),
			"every bucket is a physical queue (RabbitMQ, a quorum queue with its own Raft group) or topic (Kafka); near the "+
				"limit, one more attempt or a little more jitter makes the configuration invalid and its consumers refuse to "+
				"start, so messages wait unprocessed",
			"lower retry_jitter_ratio (each jittered retry needs up to 3 buckets), retry_attempts or max_retry_backoff_millis; "+
				"'lily schedule' shows the buckets")
	}

	if f, ok := retriesShareCap(q); ok {
		out = append(out, f)
	}

	out = append(out, crossField(q)...)

	if q.Ordering == lily.OrderingPark {
		add(Info, CodeParkNeedsKeys, `ordering = "park": only messages published with a key are kept in order`,
			"park diverts the later messages of a dead-lettered message's key; keys are set per message (lily.Message.Key, "+
				"carried as a header on RabbitMQ and as the record key on Kafka), so the configuration cannot show whether this "+
				"queue's messages have one: a message without a key has no order to keep and is dead-lettered alone, and a "+
				"later message of the same entity can overtake it",
			`publish every message of this queue with its entity's key (e.g. the order ID); if messages are independent, `+
				`use ordering = "reorder" and save the parked-set lookup`)
	}

	if q.Ordering == lily.OrderingBlock && q.Transport == lily.TransportKafka {
		add(Info, CodeBlockHoldsPartition, `ordering = "block" on Kafka: a dead-lettered record stops its whole partition`,
			"on a log, block keeps the partition's order, not only the key's: every later record of the partition, whatever "+
				"its key, waits (parked in the catalog, in offset order) until the head is redriven and processed or "+
				"discarded; one poison record delays a share of all keys (1 / the partition count)",
			`keep it where the partition's order matters (change data capture, event sourcing); where only each key's `+
				`order matters, use ordering = "park", which holds the key alone`)
	}

	if q.Ordering != lily.OrderingReorder && q.Transport == lily.TransportNATS {
		add(Info, CodeNATSOrderedOneInFlight, `ordering = "`+q.Ordering+`" on NATS: one message in flight, and a retry's delay holds the queue`,
			"the consumer is declared with MaxAckPending 1, so the server hands out the stream in order, one message at a "+
				"time across every instance; a retry is a NAK with its delay, and the message waits it out at the head of the "+
				"queue, every key behind it (as a consumer that died holding a message holds it for AckWait)",
			`keep retry delays short on this queue (retry_backoff_millis, max_retry_backoff_millis), or use ordering = "reorder" `+
				`where the order of a key's messages does not matter`)
	}

	if strings.TrimSpace(q.Owner) == "" {
		add(Warning, CodeNoOwner, "no owner: nobody is named to triage this queue's dead letters",
			"a dead-letter queue that nobody owns is a slower way to drop messages: entries wait unnoticed until "+
				"dlq_retention_hours discards them, and alarms go nowhere",
			`set owner = "<team>" to the team that owns the consumer; only they can tell a consumer bug from bad input`)
	}
	return out
}

// retrySpanShort reports CodeRetrySpanShort for q, if expected_outage is
// longer than the retry span.
func retrySpanShort(q lily.QueueConfig) (Finding, bool) {
	s := q.Settings()
	outage := q.ExpectedOutageDuration()
	if outage <= 0 {
		return Finding{}, false
	}
	sch, err := plan.FromPolicy(q.Policy())
	if err != nil {
		return Finding{}, false
	}
	// Rate 1: the dead-lettered figure is per message/s of traffic.
	r, err := plan.Outage(plan.OutageParams{Rate: 1, Outage: outage, Schedule: sch})
	if err != nil || r.DeadLettered <= 0 {
		return Finding{}, false
	}
	cmd := fmt.Sprintf("lily plan outage --rate R --outage %s --attempts %d --backoff-millis %d --max-backoff-millis %d",
		q.ExpectedOutage, sch.Attempts, s.RetryBackoffMillis, s.MaxRetryBackoffMillis)
	if q.Policy().Chain() {
		cmd = fmt.Sprintf("lily plan outage --rate R --outage %s --attempts %d --delays-millis %s",
			q.ExpectedOutage, sch.Attempts, joinMillis(q.RetryDelaysMillis))
	}
	fix := "to ride it out with retries, raise max_retry_backoff_millis or retry_backoff_millis"
	if q.Policy().Chain() {
		fix = "to ride it out with retries, raise the delays of retry_delays_millis"
	}
	if a, ok := attemptsToCover(q, outage); ok {
		fix = fmt.Sprintf("to ride it out with retries, set retry_attempts = %d (span %s with these delays) or raise "+
			"max_retry_backoff_millis", a, plan.FormatSeconds(float64(policyWithAttempts(q, a).Span())/1000))
		if q.Policy().Chain() {
			fix = strings.Replace(fix, "or raise max_retry_backoff_millis", "or raise the delays of retry_delays_millis", 1)
		}
	}
	fix += ", though every poison message then gets as many attempts; better, pause consumption while the dependency " +
		"is down (a circuit breaker), so that the outage becomes lag, not dead letters"
	return Finding{
		Severity: Error, Queue: q.Name, Code: CodeRetrySpanShort,
		What: fmt.Sprintf("the retry span of its %d attempts, %s, is shorter than expected_outage = %q, %s",
			r.Attempts, plan.FormatSeconds(r.RetrySpanS), q.ExpectedOutage, plan.FormatSeconds(r.OutageS)),
		Why: fmt.Sprintf("every message that arrives in the first %s of such an outage fails all %d attempts and is dead-lettered: "+
			"'%s' gives R × %s healthy messages dead-lettered (%s per message/s of traffic)",
			plan.FormatSeconds(r.DeadLettered), r.Attempts, cmd, plan.FormatNumber(r.DeadLettered), plan.FormatNumber(r.DeadLettered)),
		Fix: fix,
	}, true
}

// attemptsToCover returns the smallest retry_attempts (at most
// retry.MaxAttempts) whose span with q's delays covers outage.
func attemptsToCover(q lily.QueueConfig, outage time.Duration) (int, bool) {
	for a := q.RetryAttempts + 1; a <= retry.MaxAttempts; a++ {
		if policyWithAttempts(q, a).Span() >= outage.Milliseconds() {
			return a, true
		}
	}
	return 0, false
}

// joinMillis writes delays as a flag value: 10000,60000.
func joinMillis(ds []int64) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, ",")
}

// policyWithAttempts is q's retry policy with a attempts.
func policyWithAttempts(q lily.QueueConfig, a int) retry.Policy {
	p := q.Policy()
	p.Attempts = a
	return p
}

// retriesShareCap reports CodeRetriesShareCap for q, if two or more of its
// retries wait exactly max_retry_backoff_millis.
func retriesShareCap(q lily.QueueConfig) (Finding, bool) {
	p := q.Policy()
	if p.Chain() {
		return Finding{}, false // a chain has no cap: its delays are as written
	}
	first := 0
	for n := 1; n <= p.Attempts; n++ {
		if p.Nominal(n) >= p.MaxBackoffMillis {
			first = n
			break
		}
	}
	if first == 0 || p.Attempts-first+1 < 2 {
		return Finding{}, false
	}
	capped := p.Attempts - first + 1
	what := fmt.Sprintf("retries %d..%d (%d of %d) all wait the cap, max_retry_backoff_millis = %d",
		first, p.Attempts, capped, p.Attempts, p.MaxBackoffMillis)
	why := fmt.Sprintf("past the cap the schedule is a fixed %d ms interval: each further retry adds only %s of retry span "+
		"but costs every poison message one more attempt", p.MaxBackoffMillis, plan.FormatSeconds(float64(p.MaxBackoffMillis)/1000))
	if p.JitterRatio > 0 {
		why += "; jitter's upper delay is clamped to the cap, so capped retries spread over two delays, not three"
	}
	fix := fmt.Sprintf("if the span is what you need, keep it (or raise max_retry_backoff_millis and lower retry_attempts); "+
		"otherwise lower retry_attempts to %d", first)
	if first == 1 {
		fix = "if you meant exponential backoff, raise max_retry_backoff_millis above retry_backoff_millis; " +
			"a fixed interval is fine if you chose it"
	}
	return Finding{Severity: Info, Queue: q.Name, Code: CodeRetriesShareCap, What: what, Why: why, Fix: fix}, true
}
