package lilyprom

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric names (see the package documentation for their labels and
// meaning). 'lily alerts' builds its rules from these constants.
const (
	MetricMessages          = "lily_messages_total"
	MetricHandlerDuration   = "lily_handler_duration_seconds"
	MetricRetriesAtAck      = "lily_retries_at_ack"
	MetricDLQInflow         = "lily_dlq_inflow_total"
	MetricDLQRefused        = "lily_dlq_refused_total"
	MetricBreakerState      = "lily_breaker_state"
	MetricAbandoned         = "lily_abandoned_handlers"
	MetricRedrive           = "lily_redrive_total"
	MetricDLQEntries        = "lily_dlq_entries"
	MetricDLQOldestAge      = "lily_dlq_oldest_entry_age_seconds"
	MetricDLQRetention      = "lily_dlq_retention_seconds"
	MetricLedgerUnaccounted = "lily_ledger_unaccounted"
	MetricCatalogUp         = "lily_catalog_up"
	MetricHeldKeys          = "lily_held_keys"
	MetricQueuePaused       = "lily_queue_paused"
	MetricConsumerInstances = "lily_consumer_instances"
	MetricBrokerDLQMessages = "lily_broker_dlq_messages"
	MetricIngested          = "lily_ingest_total"
	MetricIngestErrors      = "lily_ingest_errors_total"
	MetricIngestLeaseHeld   = "lily_ingest_lease_held"
	MetricIngestLastSuccess = "lily_ingest_last_success_timestamp_seconds"
	MetricInboxDuplicates   = "lily_inbox_duplicates_total"
	MetricInboxStale        = "lily_inbox_stale_total"
	MetricInboxTwins        = "lily_inbox_twins_total"
	MetricOutboxPublished   = "lily_outbox_published_total"
	MetricOutboxFailures    = "lily_outbox_publish_failures_total"
	MetricOutboxRoundErrors = "lily_outbox_relay_errors_total"
	MetricOutboxPending     = "lily_outbox_pending"
	MetricOutboxFailing     = "lily_outbox_failing"
	MetricOutboxOldestAge   = "lily_outbox_oldest_pending_age_seconds"
	MetricOutboxUp          = "lily_outbox_up"
)

// Label names.
const (
	LabelQueue   = "queue"
	LabelOutcome = "outcome"
	LabelReason  = "reason"
	LabelState   = "state"
)

// Values of the outcome label of lily_messages_total.
const (
	OutcomeAcked        = "acked"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeReleased     = "released"
	OutcomeParked       = "parked"
	OutcomeHeld         = "held"
	OutcomeSettleFailed = "settle_failed"
)

// MessageOutcomes are the values of the outcome label of
// lily_messages_total, in a fixed order.
var MessageOutcomes = []string{OutcomeAcked, OutcomeRetried, OutcomeDeadLettered,
	OutcomeReleased, OutcomeParked, OutcomeHeld, OutcomeSettleFailed}

// Values of the outcome label of lily_redrive_total.
const (
	RedriveRedriven    = "redriven"
	RedriveNeedsManual = "needs_manual"
	RedriveFailed      = "failed"
)

// RedriveOutcomes are the values of the outcome label of
// lily_redrive_total, besides "other".
var RedriveOutcomes = []string{RedriveRedriven, RedriveNeedsManual, RedriveFailed}

// Values of lily_breaker_state.
const (
	BreakerClosedValue   = 0
	BreakerHalfOpenValue = 1
	BreakerOpenValue     = 2
)

// Other replaces a label value outside its fixed set, so that the number
// of series stays bounded whatever the input.
const Other = "other"

// DurationBuckets are the buckets of lily_handler_duration_seconds, in
// seconds: from 1 ms to past the default handler timeout (30 s).
var DurationBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// RetryBuckets are the buckets of lily_retries_at_ack: framework retries,
// one bucket per count up to 5, then the usual backoff-ladder lengths.
var RetryBuckets = []float64{0, 1, 2, 3, 4, 5, 8, 10, 15, 20}

// Handler returns an HTTP handler serving the metrics of g in the
// Prometheus exposition format (mount it at /metrics). A failing collector
// — e.g. an unreadable catalog, reported as lily_catalog_up 0 — does not
// hide the other metrics: they are served and the error is logged.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slogPrintln{},
	})
}
