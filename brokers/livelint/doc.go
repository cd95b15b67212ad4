// Package livelint holds the live checks of 'lily lint --live': they read
// the brokers a configuration names and judge them, returning the findings
// of package lint (whose Static judges the configuration alone, without
// any broker client).
//
//   - RabbitMQ, through the management API: ReadBroker reads a Broker
//     snapshot, CheckBroker judges it (pure), RabbitMQ does both. Codes:
//     topology-drift, dlx-missing, dlx-unbound,
//     at-least-once-without-reject-publish, delivery-limit-without-dlx,
//     no-delivery-limit, dlq-message-ttl, ttl-without-dlx,
//     queue-not-quorum, delivery-count-semantics. RabbitMQLive does the
//     same, or, when the management API cannot be read (the plugin is off
//     on a fresh broker), reads the main queues' types through AMQP
//     (queue-not-quorum, a missing main queue) and names the checks it
//     could not run in one live-checks-not-run error.
//   - Kafka, through the cluster: ReadKafka reads the dead-letter topics'
//     configs and the share groups' settings, CheckKafka judges them
//     (KafkaDLT: dlt-outlives-catalog; KafkaShare: share-delivery-limit
//     against the group's real limit, share-lock-short); the live
//     share-delivery-limit replaces the static one (WithoutStaticShare).
//   - SQS: ReadSQS reads the queues' attributes, CheckSQS judges them
//     (sqs-queue-missing, sqs-no-redrive-policy,
//     sqs-max-receive-count-at-limit, sqs-dlq-retention-short,
//     sqs-visibility-below-handler-timeout).
//
// The package lives under brokers because it links the broker clients
// (amqp091 through transport/rabbitmq, franz-go, the AWS SDK); package lint
// links none of them.
package livelint
