// Package inbox makes a handler's effects idempotent in the handler's own
// database: Once applies a message's effect at most once per (consumer,
// event ID), and Newer applies it only if the entity version it carries is
// newer than the stored one. Both write in the handler's transaction
// (SQLite or PostgreSQL, through database/sql or pgx), so the mark commits
// with the effect: a crash between the commit and the broker ack, a
// duplicate publish or a redrive of an applied message is acked without
// running the effect again, and reported to the consumer's hooks
// (lily.EventDuplicate, lily.EventStale).
//
// Lily keeps a message's event ID through retry and redrive, which is what
// makes it the deduplication key. A message another service published
// without an ID has the transport's ID: its log coordinates on Kafka, its
// row on SQLite — one per message — or, on RabbitMQ, a content ID that
// byte-identical messages share: those are one message to the inbox, and
// every such twin it finds is reported (lily.EventTwin, a warning), or
// refused with Inbox.ContentIDs. Create the tables with Migrate (or
// Schema) and prune the marks with Prune past Horizon. See docs/inbox.md.
package inbox
