// Package lilyprom exports Lily's runtime and dead-letter work list as
// Prometheus metrics. The root package never imports Prometheus: a Hook is
// attached to a consumer through lily.ConsumerOptions.Hooks, and a
// CatalogCollector reads the catalog when Prometheus scrapes.
//
//	reg := prometheus.NewRegistry()
//	hook, err := lilyprom.NewHook(reg)             // runtime outcomes
//	...
//	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: q, Hooks: []lily.Hook{hook}})
//	reg.MustRegister(lilyprom.NewCatalogCollector(store, tr, lilyprom.CatalogOptions{Queues: names}))
//	http.Handle("/metrics", lilyprom.Handler(reg))
//
// # Metrics
//
// Every label is low-cardinality: queue is a configured queue name; outcome,
// reason and state take values from the fixed sets below (anything else is
// counted as "other"). Event IDs, keys, error messages and hosts are never
// labels.
//
// From the Hook (one process's consumers, counted since it started):
//
//	lily_messages_total{queue,outcome}          counter
//	    Settled deliveries by outcome, counted when the settlement is
//	    confirmed: acked; retried (a copy went to a delay bucket); dead_lettered
//	    (a copy with evidence went to the dead-letter destination); released
//	    (given back for redelivery: lily.Crashed, a hand-off that failed, a
//	    key-state error or a breaker hold on a queue without buckets; never
//	    a handler abandoned past its timeout, which is a transient failure);
//	    held (a transient failure while the circuit breaker was open: it waits
//	    in a bucket without spending a retry); settle_failed (the hand-off was
//	    not confirmed, the original stays unacknowledged and is redelivered);
//	    parked (ordering "park" or "block": a message of a held key diverted
//	    into the catalog behind its key's head). Every outcome of a queue is exported from the first event
//	    (or Hook.Init), at zero.
//	lily_handler_duration_seconds{queue}        histogram
//	    How long the handler ran for one delivery, in seconds, including
//	    immediate retries; observed with the delivery's outcome (acked,
//	    retried, dead_lettered, held, released). Deliveries dead-lettered
//	    without calling the handler (delivery_limit, invalid_retry_count) and
//	    settlements that failed are not observed. Buckets: DurationBuckets.
//	lily_retries_at_ack{queue}                  histogram
//	    Framework retries (x-retry-count) a message had taken when its
//	    handler succeeded, one observation per ack. Where successes stop is
//	    where retry_attempts belongs: successes at the last retry mean the
//	    limit cuts recoverable messages off. Buckets: RetryBuckets.
//	lily_dlq_inflow_total{queue,reason}          counter
//	    Messages this process dead-lettered, by reason: permanent,
//	    retries_exhausted, delivery_limit, invalid_retry_count (exported at
//	    zero from the start), parked, expired, maxlen, unroutable, rejected,
//	    other. Dead letters a broker made by itself (no Lily evidence) are
//	    counted by the process that ingests them into the catalog, once
//	    each (Hook.BrokerDeadLettered; 'lily serve' does, as it drains the
//	    broker DLQs continuously).
//	lily_dlq_refused_total{queue}                counter
//	    Dead letters this process stored in the catalog only, because the
//	    broker refused their dead-letter copy (the DLQ at its max-length
//	    with reject-publish, a copy over frame_max); they are also counted
//	    in lily_dlq_inflow_total. Above zero: an operator must drain or
//	    enlarge the dead-letter queue ('lily serve' /healthz says so too).
//	lily_breaker_state{queue}                    gauge
//	    The consumer's circuit breaker: 0 closed, 1 half_open (one probe in
//	    flight), 2 open (fetching stopped). 0 for a queue without a breaker.
//	    With several consumers of one queue in one process it shows the last
//	    change reported by any of them.
//	lily_abandoned_handlers{queue}               gauge
//	    Handlers abandoned past handler_timeout_millis and the grace that
//	    have not returned yet. Each keeps a handler slot; at the consumer's
//	    concurrency no handler starts (a dependency hangs and the handler
//	    ignores its context) — alert on it.
//	lily_redrive_total{queue,outcome}            counter
//	    Redriven dead letters, by outcome: redriven (sent back to the source
//	    queue and confirmed), needs_manual (refused at max_redrives), failed
//	    (the publish failed; the entry stays pending). Counted by the code
//	    that redrives, through Hook.Redrive (a RedriveObserver); dry runs are
//	    not counted.
//	lily_inbox_duplicates_total{queue}           counter
//	    Deliveries the inbox (package inbox) found already applied by their
//	    consumer — a redelivery after a crash between commit and ack, a
//	    duplicate publish, a redrive of an applied message — and acked
//	    without running the effect (lily.EventDuplicate).
//	lily_inbox_stale_total{queue}                counter
//	    Deliveries the version guard (inbox.Newer) found not newer than the
//	    entity's stored version: acked as a no-op, never applied, never
//	    dead-lettered (lily.EventStale).
//	lily_inbox_twins_total{queue}                counter
//	    First deliveries of a message without an ID of its own whose content
//	    ID (lily.Delivery.ContentID: RabbitMQ's synthetic ID) the inbox found
//	    already applied: a byte-identical twin, or a message its producer
//	    published twice. Acked without running the effect, with a warning
//	    (lily.EventTwin). Alert on any: the producer should set a message_id.
//
// From the CatalogCollector (the catalog as it is at each scrape, for every
// queue in the catalog, its ledger or CatalogOptions.Queues):
//
//	lily_dlq_entries{queue,state}                gauge
//	    Catalog entries by state: pending, parked, needs_manual (the held
//	    work list), redriven, discarded, erased (records of decisions). Every
//	    state of a queue is exported, at zero when it has none.
//	lily_dlq_oldest_entry_age_seconds{queue}      gauge
//	    Age of the queue's oldest held entry (pending, parked or
//	    needs_manual) since it was dead-lettered; 0 when none is held.
//	    Retention (dlq_retention_hours) counts from the same moment.
//	lily_dlq_retention_seconds{queue}            gauge
//	    The queue's dlq_retention_hours, in seconds, for the queues given
//	    in CatalogOptions.Retention: the deadline the oldest entry's age is
//	    drawn against ('lily dashboard').
//	lily_dlq_alarming_entries{queue}             gauge
//	    Held entries not triaged known_issue (their own triage status, else
//	    their group's: 'lily dlq triage'). LilyDLQNotEmpty alarms on it, so
//	    a known group is quiet while a new fingerprint still alarms.
//	lily_ledger_unaccounted{queue}               gauge
//	    The ledger's lost figure: accepted − acked − dead_lettered −
//	    discarded − redirected − in_flight, as 'lily reconcile' prints it. Positive:
//	    messages unaccounted for; negative: counted twice (a crash between a
//	    ledger write and a broker ack). Exported only when the collector has
//	    an in-flight counter (without one, in-flight messages would show as
//	    lost). The figures are read one after another, not atomically, so a
//	    busy queue can show a non-zero value for one scrape; alert on a value
//	    that lasts.
//	lily_held_keys{queue}                        gauge
//	    Keys held by ordering "park" or "block" (lily dlq parked): each has a
//	    dead-lettered head, and its later messages wait behind it, parked in
//	    the catalog. 0 when none.
//	lily_queue_paused{queue}                     gauge
//	    1 while the queue is paused ('lily queue pause'): its consumers
//	    take no messages, so its lag grows by an operator's choice.
//	lily_consumer_instances{queue,state}         gauge
//	    Consumer instances by their heartbeats (docs/design.md §9.10):
//	    state live, or stale (silent for 3 heartbeat intervals: the process
//	    died or cannot reach the catalog; pruned after a day).
//	lily_catalog_up                              gauge
//	    1 when every catalog query of the scrape succeeded, else 0 (the error
//	    is also reported to the registry).
//
// From the IngestMetrics (a continuous ingest of broker DLQs, as 'lily
// serve' runs it; per process):
//
//	lily_ingest_total{queue}                     counter
//	    Dead letters drained from the queue's broker DLQ into the catalog
//	    (catalog commit, then broker ack), duplicates absorbed included.
//	lily_ingest_errors_total{queue}              counter
//	    Ingest passes that failed; the dead letters stay in the broker.
//	lily_ingest_lease_held{queue}                gauge
//	    1 while this process holds the queue's ingest lease: with several
//	    replicas on one catalog exactly one drains each queue at a time.
//	lily_ingest_last_success_timestamp_seconds{queue} gauge
//	    When this process last drained the queue's broker DLQ to the end.
//
// From the BrokerDLQCollector (the broker as it is at each scrape):
//
//	lily_broker_dlq_messages{queue}              gauge
//	    Dead letters still in the broker, not in the catalog yet: RabbitMQ
//	    the ready messages of <queue>.dlq.v2, Kafka the dead-letter topic's
//	    records past the drain group's offsets. Near 0 while an ingest
//	    runs; a value that stays up means nobody ingests (alert
//	    LilyBrokerDLQNotIngested).
//
// From the RelayMetrics (an outbox relay, outbox.RelayOptions.Observer, as
// 'lily relay --metrics' runs it; per relay process):
//
//	lily_outbox_published_total{queue}           counter
//	    Outbox rows published and confirmed by the transport.
//	lily_outbox_publish_failures_total{queue}    counter
//	    Rows whose publish was not confirmed; they stay and are retried.
//	lily_outbox_relay_errors_total               counter
//	    Rounds that could not read or mark the outbox (database errors).
//
// From the OutboxCollector (the application's outbox as it is at each
// scrape, outbox.Backlog):
//
//	lily_outbox_pending{queue}                   gauge
//	    Rows not published yet.
//	lily_outbox_failing{queue}                   gauge
//	    Of those, rows with at least one unconfirmed publish.
//	lily_outbox_oldest_pending_age_seconds{queue} gauge
//	    Age of the oldest unpublished row, 0 with none: it grows while no
//	    relay runs or every publish fails (alert LilyOutboxStalled).
//	lily_outbox_up                               gauge
//	    1 when the scrape could read the outbox, else 0.
//
// # Cost of a scrape
//
// A scrape runs one grouped count over the catalog's (queue, state) index,
// one indexed lookup per queue for the oldest held entry (the partial
// index of held entries by time), and the ledger (another grouped count,
// plus the in-flight counter's own query per queue). Nothing is loaded
// beyond one row per queue and state. On the project's 2-core machines a
// scrape of 200,000 entries takes about 75 ms (BenchmarkCatalogCollect):
// about 0.4 s per million entries, so keep the scrape interval of a large
// catalog at 30 s or more.
//
// # Alerts
//
// 'lily alerts --config FILE' writes Prometheus alerting rules on these
// metrics for every configured queue, with its owner and a runbook line.
package lilyprom
