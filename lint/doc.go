// Package lint finds the misconfigurations that lose or delay messages
// quietly: the engine behind 'lily lint'.
//
// A Finding has a severity, the Lily queue it is about, a stable code, what
// is wrong, why it loses or delays messages and the fix. Severities mean:
//
//   - error: messages are lost (silently, or discarded before anyone can
//     act) or the configuration contradicts a requirement it states itself
//     (expected_outage); 'lily lint' exits 1.
//   - warning: messages are dead-lettered or delayed needlessly, or a limit
//     is close; 'lily lint --strict' exits 1.
//   - info: worth knowing; never changes the exit code.
//
// Static judges a configuration alone and is pure; this package links no
// broker client. The live checks of 'lily lint --live', which read the
// brokers (RabbitMQ's management API, the Kafka cluster, SQS), are in
// package brokers/livelint and return these same Findings. NewReport sorts
// and counts findings; Report is also the JSON output of 'lily lint
// --json'.
//
// Static codes: no-queues, no-retries, delivery-limit-high,
// delivery-limit-one, retry-span-short, dlq-retention-below-source,
// dlq-retention-below-triage, jitter-without-retries, buckets-near-limit,
// topology-buckets-near-limit, retries-share-cap, park-needs-keys,
// block-holds-partition, nats-ordered-one-in-flight, no-owner, handler-timeout-over-lease,
// retry-capacity-short, breaker-without-retries; for transport "pubsub"
// (lint/pubsub.go): pubsub-max-attempts, pubsub-retry-retention,
// pubsub-retry-hops, pubsub-retry-rounded, pubsub-retry-needs-consumer;
// for transport "kafka": dlt-outlives-catalog (lint/kafka_dlt.go) and, on a
// queue with kafka_share_group, share-delivery-limit (lint/kafka_share.go);
// for transport "sqs": sqs-visibility-below-handler-timeout (lint/sqs.go);
// for [[foreign_dlq]] kind = "azure-functions" (lint/azure_functions.go):
// functions-max-dequeue-one, functions-max-dequeue-high,
// functions-retry-span-short; for [[lambda]] (lint/lambda.go):
// lambda-no-failure-destination, lambda-destination-undrained.
// Live codes (constants here, findings from brokers/livelint):
// topology-drift, dlx-missing, dlx-unbound,
// at-least-once-without-reject-publish, delivery-limit-without-dlx,
// no-delivery-limit, dlq-message-ttl, ttl-without-dlx,
// delivery-count-semantics, queue-not-quorum, live-checks-not-run; for kafka:
// dlt-outlives-catalog, share-delivery-limit against the share group's
// real delivery limit, share-lock-short; for sqs: sqs-queue-missing,
// sqs-no-redrive-policy, sqs-max-receive-count-at-limit,
// sqs-dlq-retention-short, sqs-visibility-below-handler-timeout; for Azure
// Storage queues: functions-poison-undrained. The doc
// comments of Static and of livelint's functions give each rule.
//
// The rules come from the seed articles: a dead-letter exchange that does
// not exist or has no binding for the routing key, a quorum queue with a
// delivery limit and no dead-letter exchange, and a DLQ retention shorter
// than the source's are the "silent loss" failure mode of seed 000, whose
// symptom is that there is none; at-least-once dead-lettering needs
// reject-publish (seed 004); a retry span shorter than an outage
// dead-letters healthy messages (seed 000's worked example, computed by
// package plan); a DLQ needs an owner and a retention longer than its
// triage time; retry retention must count buckets × capacity (seed 001),
// and a handler must end inside its lease.
package lint
