// Package azqueue is Lily's Azure Storage queue transport
// (transport = "azqueue"), built on the Azure SDK for Go
// (sdk/storage/azqueue). The service URL makes Azure and Azurite, the
// local emulator, the same code.
//
// Mapping of Lily's mechanisms onto Storage queues (docs/azqueue.md):
//
//   - receive: Get Messages (up to 32), polled every PollInterval until a
//     message comes or the wait ends (Storage queues have no long
//     polling). The delivery count is the service's DequeueCount, less
//     the count at Lily's last retry of the message (the envelope's
//     dequeue_base): a crash-type poison is caught by it before its
//     handler runs. The lease is the visibility timeout, extended with
//     Update Message (transport.LeaseExtender); every update returns a
//     new pop receipt, which the receipt keeps.
//   - retry: Update Message in place: the envelope rewritten with the new
//     x-retry-count and dequeue_base, and the visibility set to the retry
//     delay (whole seconds, rounded up, never shortened). The schedule is
//     the configured one to the second, up to the service's 7-day
//     visibility limit; a longer delay is a configuration error (Declare,
//     and Settle as a last guard) naming the queue, the limit and the fix.
//   - dead-letter: a copy in the envelope with the evidence enqueued to
//     Lily's DLQ "<queue>-dlq" (never expiring), then the original deleted
//     with its pop receipt. A copy not confirmed leaves the original.
//
// Storage queue messages are one string with no headers, so Lily's
// messages travel in a versioned JSON envelope (Envelope) that keeps the
// original body byte for byte. A message that is not an envelope is a
// foreign producer's: its text is the body, its Storage message ID its
// event ID.
package azqueue
