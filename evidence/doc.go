// Package evidence is Lily's dead-letter evidence: the headers that travel with a
// dead-lettered message so that someone can diagnose it months later (docs/design.md §7).
//
// Headers are map[string]any whose values use AMQP-compatible Go types: string, []byte,
// bool, int8, int16, int32, int64, int, float32, float64, time.Time, nil, []any and
// map[string]any. Writers in this package use only string, int32 and int64; readers are
// tolerant (a string may arrive as []byte, as it does from Kafka; a number as any integer
// type or as decimal text), except for x-retry-count, whose canonical form is a contract
// (see [RetryCount]).
//
// The package has six parts:
//
//   - header names and dead-letter reasons ([HeaderEventID] ..., [Reason]);
//   - the canonical x-retry-count rules ([RetryCount], [SetRetryCount]);
//   - the evidence record of one dead-lettering ([Record], [Record.Apply], [Decode]);
//   - the bounded attempt history a message carries through its retries ([History],
//     [HeaderAttempts], [DecodeAttempts]);
//   - redaction, truncation and grouping of error text ([Redactor], [Truncate],
//     [Fingerprint]);
//   - decoders for evidence written by other systems — RabbitMQ, MassTransit, Spring
//     Kafka, Kafka Connect, Kafka Streams, NServiceBus — for triage ([DecodeForeign],
//     [BrokerReason]).
//
// Nothing in this package alters a message body; [Record.Apply] touches only the
// evidence headers it owns.
package evidence
