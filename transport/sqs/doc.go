// Package sqs is Lily's Amazon SQS transport (transport = "sqs"), built on
// aws-sdk-go-v2. The endpoint makes real AWS and an emulator the same code.
//
// Mapping of Lily's mechanisms onto SQS:
//
//   - receive: ReceiveMessage with long polling; the delivery count is
//     SQS's ApproximateReceiveCount; the lease is the visibility timeout,
//     extended with ChangeMessageVisibility (transport.LeaseExtender).
//   - retry: a new copy sent with DelaySeconds (the bucket delay rounded up
//     to whole seconds) and x-retry-count, then the original deleted; the
//     copy's receive count starts again. SQS caps DelaySeconds at 15
//     minutes: a longer retry delay is a configuration error (Declare, and
//     Settle as a last guard) naming the queue and the limit — never
//     chained, never shortened.
//   - dead-letter: a copy with evidence sent to Lily's own DLQ
//     "<queue>-dlq", then the original deleted. The queue's redrive policy
//     points at the same DLQ with maxReceiveCount = delivery_limit + 1, as
//     a backstop for a consumer that never settles.
//
// Evidence packing. SQS allows 10 message attributes per message, fewer
// than Lily's evidence fields. The producer's attributes travel as they
// are, each as its own attribute with its own data type. Everything Lily
// adds (x-lily-*, x-retry-count, the key and type) is packed into ONE
// attribute, "x-lily" (String, JSON of typed headers, see
// transport.MarshalHeaders), which also records the Lily header types of
// attributes that SQS cannot type (int32, bool, time, decimal). So a copy
// carries the producer's attributes plus one. When the producer already
// uses all 10, the producer's attributes are carried inside "x-lily" too
// (name, data type and value exactly) and restored on receive: Lily and
// its catalog see them unchanged, other readers of the DLQ see one
// attribute. Bodies that SQS cannot carry (not valid XML text, e.g. binary)
// are sent base64-encoded and marked in the pack; the delivery's body is
// the original bytes.
//
// Identity (docs/design.md §7): a message Lily did not publish has the SQS
// MessageId as its event ID; it is written into the pack of every copy, so
// retry and DLQ copies keep it.
//
// FIFO queues (name ending in ".fifo"): MessageGroupId is the message key
// (the ordering key of park/block), MessageDeduplicationId the event ID.
// SQS FIFO queues have no per-message delay, so a FIFO queue with
// retry_attempts > 0 is a configuration error.
package sqs
