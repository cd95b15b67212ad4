// Package pubsub is Lily's Google Cloud Pub/Sub transport
// (cloud.google.com/go/pubsub/v2's API clients, synchronous Pull). Tests
// run on the SDK's in-process fake, pstest.
//
// # Queues, topics and subscriptions
//
// A Lily queue is one subscription: Options.Queues (lily.toml's
// [pubsub_queues.NAME]) names its topic and subscription, both the queue's
// name by default. Declare ('lily topology apply') creates, for
// subscription S on topic T:
//
//	T, S             the main topic and subscription; dead-letter policy to
//	                 S.dlt after max_delivery_attempts (delivery_limit + 2,
//	                 at least 5, at most 100); ack deadline = the lease
//	S.dlt, S.dlt     Lily's dead-letter topic WITH its own subscription (a
//	                 topic without one drops what is published to it)
//	S.retry, S.retry the retry-return topic and subscription (same
//	                 dead-letter policy as S): due retry copies, the
//	                 redeliveries a consumer gives back, and redriven,
//	                 redirected or released messages (PublishParams.Direct):
//	                 read by S alone, so no other subscription of T sees them

//	S.retry.<ms>ms   one delay topic and subscription per retry bucket
//	                 (no dead-letter policy)
//
// # Delivery count
//
// Receive pulls S (and S.retry) and hands out the subscription's
// DeliveryAttempt as Delivery.DeliveryCount. The service keeps it only on a
// subscription with a dead-letter policy, so Receive refuses one without
// (transport.ErrUnsafeQueue), and one whose max_delivery_attempts is not
// above delivery_limit. Lily dead-letters at delivery_limit itself, with
// evidence; the policy is the backstop (its dead letters carry only
// CloudPubSubDeadLetterSource* attributes, and DrainDeadLetters ingests
// them with reason delivery_limit, deduplicated by message ID). Pub/Sub
// counts an attempt when a message is pulled, not when a handler starts, so
// the transport pulls no more than asked, pulls one at a time after it saw
// a redelivery (until a first delivery comes), and hands first deliveries
// out ahead of redeliveries (never across a key's order): a process that
// dies gives back, with raised counts, only what it pulled. With competing
// consumers a dead one's messages come back, raised, to the others, and a
// consumer still pulling wide can get several redeliveries in one batch:
// before one of them runs alone, the others are republished to S.retry with
// their attempts so far in x-lily-prior-deliveries (the copy's count goes on
// from there) and acked, so that only the one is pulled if it kills the
// process (giveback.go).
//
// # Retry: delay topics, held without a handler
//
// Pub/Sub cannot delay one message. The two ways out are (a) nack or
// ModifyAckDeadline on the original, which costs one delivery attempt per
// retry (retries and crashes share max_delivery_attempts, at most 100),
// caps a delay at 600 s and cannot write x-retry-count; or (b) delay
// topics. This transport does (b): a Retry publishes a copy (the
// settlement's headers, x-retry-count included, plus x-lily-due-at) to
// S.retry.<ms>ms, waits for the service's message ID, then acks the
// original (docs/design.md §4's order). Every Receive of the queue also moves its
// delay subscriptions: a copy not due yet is hidden again with
// ModifyAckDeadline for its remaining time (whole seconds, up to 600 s per
// hop) — or, when due within HoldInProcess (1 s), kept in the transport's
// memory with no handler or worker attached — and a due copy is published
// to S.retry (confirmed) and acked in the delay subscription. S.retry is
// read by this subscription alone, so the topic's other subscribers never
// see a retry. Trade-offs against docs/design.md §1.2/§1.3: the wait is in the
// broker (unacked in a delay subscription whose holds cost no delivery
// attempt), never in a handler, and the retried copy's count starts again
// at 1 and is the broker's; but a copy is moved only while a consumer of
// the queue runs (no consumer: due retries wait — lag, not loss), delays
// above 1 s are rounded up to whole seconds, a delay over 600 s is several
// hops, a delay beyond the 7-day retention would expire, and a process
// that dies while holding a copy in memory delays it by the ack deadline.
// lily lint reports each (pubsub-retry-*).
//
// # Attributes: what is packed how
//
// Pub/Sub attributes are strings, at most 100 per message, keys ≤ 256
// bytes, values ≤ 1024 bytes, a message ≤ 10 MB; pstest enforces none of
// this, so Lily does (ErrLimit). A string header whose name and value fit
// is one attribute, unchanged — every attribute a foreign producer sent
// comes back exactly as sent. Every other header (int32 x-retry-count,
// bools, bytes, AMQP decimals, tables, a stack trace over 1024 bytes) is
// packed: transport.MarshalHeaders' typed JSON, cut at rune boundaries into
// x-lily-packed.000, .001, ... of ≤ 1024 bytes each, so that its Go type
// survives. The event ID and type travel as x-lily-event-id and
// x-lily-type, the key as the ordering key. When a dead-letter copy does
// not fit, Lily gives up its own evidence, never the producer's
// attributes: the stack is cut to 1024 bytes, then the stack, consumer
// version, host, failure times and raw retry count are dropped, then the
// error message is cut to 128 bytes, and x-lily-evidence-trimmed = "true"
// says so. A copy that still does not fit (or that the service refuses
// with INVALID_ARGUMENT) fails with transport.ErrDeadLetterRefused under
// SettleParams.FailRefused: ledger.Accounted stores the dead letter in the
// catalog, full evidence and original bytes, and acks the original.
//
// # Identity
//
// The event ID is x-lily-event-id, else the Pub/Sub message ID (docs/design.md §7):
// the same on every redelivery; a retry or dead-letter copy carries it as
// x-lily-event-id (the copy's own message ID is new).
//
// # Counting
//
// The Pub/Sub API cannot count a subscription's messages: InFlight uses
// Options.InFlight (for example Cloud Monitoring's
// subscription/num_undelivered_messages), else returns ErrNoCount.
// DeadLetterDepth pulls the dead-letter subscription and gives it back.
package pubsub
