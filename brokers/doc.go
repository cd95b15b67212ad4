// Package brokers opens the broker transports a Lily configuration names:
// RabbitMQ (rabbitmq_url), Kafka (kafka_brokers), SQS (sqs_region,
// sqs_endpoint, the AWS credentials of the environment) and Pub/Sub
// (pubsub_project). It is what 'lily serve', 'lily dlq ...', 'lily
// consume' and 'lily topology' use to reach the queues of a lily.toml, and
// what a Go program can use to do the same.
//
// A Set connects on first use, one connection (or client) per broker for
// all the queues on it, and registers each queue's spec with its transport
// (ForQueue, Sources). Counters answers the ledger's per-queue questions
// (in flight, dead letters not yet ingested) from the transport each queue
// lives on. The Options functions (SQSOptions, PubSubOptions, KafkaOptions)
// turn the configuration into transport options for programs that open a
// transport themselves.
//
// This package links every broker SDK (franz-go, AWS, Google Cloud);
// config, lint and ingest link none (imports_test.go at the repository's
// root keeps it so). The live checks of 'lily lint --live', which read
// brokers, are in the subpackage livelint.
package brokers
