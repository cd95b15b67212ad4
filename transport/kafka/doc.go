// Package kafka is Lily's Kafka transport (github.com/twmb/franz-go), after
// docs/design.md §8: a consumer group on the main topic that never blocks, one retry
// topic per delay bucket whose partitions are paused until their head record
// is due, a dead-letter topic with the same key and partition number, and a
// persistent attempt counter that survives crashes and rebalances.
//
// # Topics
//
// A Lily queue on Kafka is a topic. Declare creates, for queue <topic>:
//
//	<topic>                 the main topic, consumed by the group DefaultGroup(<topic>) = "lily.<topic>"
//	<topic>.retry.<ms>ms    one retry topic per distinct delay bucket (docs/design.md §5)
//	<topic>.retry.0ms       the return topic (ReturnTopic): redrives and give-backs, read by the group alone
//	<topic>.dlt             the dead-letter topic (retention.ms from dlq_retention_hours, 336 h by default: Options.DeadLetterRetention)
//	<topic>.attempts        compacted: the attempt counter's snapshots (see AttemptStore)
//
// all with the main topic's partition count, so that a retry or
// dead-letter copy goes to the partition with the original's number (and,
// having the same key, would have gone there anyway). Consumers subscribe
// to the main topic and to every "<topic>.retry.<n>ms" topic by regular
// expression, so copies in a bucket that was removed from the
// configuration are still consumed.
//
// # Receive and settle
//
// Each consumer instance (ReceiveParams.Consumer) is one group member with
// its own franz-go client. Receive hands out fetched records of the main
// topic and the due records of the retry topics, round robin over the
// partitions and in offset order within one; a retry topic's partition is
// paused while it holds a fetched copy that is not due, and Receive polls no
// longer than until the next copy is due: the wait is in the broker, never
// in a handler. A retry copy comes back with its original's partition and
// offset (carried in x-lily-source-partition and x-lily-source-offset,
// removed before the runtime sees the headers), so dead-letter evidence
// names the original coordinates, not the retry topic's.
//
// Settle produces each Retry or DeadLetter copy with acks=all and waits for
// it; only a confirmed copy marks its original settled. The group's offsets
// are then committed synchronously, each partition up to its first record
// not settled, so the committed offset never passes a record whose copy was
// not confirmed: after a crash such a record is redelivered, not lost. A
// failed produce fails that settlement and leaves the original unsettled;
// the runtime releases it, and Release hands it out again (count raised).
// When a partition is revoked, its member waits up to RevokeTimeout for its
// handed-out records to be settled and commits; what is still unsettled
// then is void (ErrLeaseLost) and is redelivered by the new owner.
//
// # The persistent attempt counter
//
// Kafka keeps no delivery count, so a record that kills its consumer would
// crash-loop the group forever. Before Receive returns records, their owner
// saves, per partition, a snapshot of every record it handed out and that is
// not settled yet, with how often it was handed out (AttemptStore; by default
// one record per group and partition in the compacted <topic>.attempts,
// keyed so that compaction keeps one snapshot per partition). A member that
// takes a partition over — a restarted process, or another member after a
// rebalance — loads the last snapshot before handing anything out, so a
// record's DeliveryCount continues across processes, and the runtime
// dead-letters it with reason delivery_limit, without calling the handler,
// once the count passes delivery_limit.
//
// Why this is enough, and cheap:
//
//   - Written before the handler runs: a snapshot is saved (acks=all, or a
//     committed SQLite transaction) before Receive returns the records it
//     counts; if the save fails, nothing is handed out.
//   - Never under-counted: counts only grow while a record is unsettled;
//     a partition has one writer at a time (its owner; revocation waits for
//     any save in flight and no save follows it), and the next owner starts
//     from the last confirmed snapshot. So each hand-out of a record that
//     was never settled is in the count its next owner sees, and a record
//     that kills every process that takes it reaches delivery_limit after
//     delivery_limit deaths (TestCrashTypePoison).
//   - Only what a crash can leave behind is recorded: a settled record, or
//     one below the committed offset, leaves the snapshot (at the next save
//     of its partition); a crash can only redeliver records at or past the
//     committed offset, and a poison is never settled, so it never leaves.
//     A record that was settled but not yet committed when a process died
//     may come back with a stale count one higher, never more: it is
//     handed out alone (IsolateRedeliveries), settled and committed before
//     the next redelivered record is handed out, so it is not counted again.
//     Crash collateral stays at one extra delivery.
//   - Cost: one save per Receive call that hands records out (one produce
//     to one partition per touched partition, batched in one request), not
//     one write per record; the snapshot holds at most the prefetch window.
//     Settling writes nothing to the store. BenchmarkConsume measures it.
//
// Known limit: a zombie member (one the group expelled but that still runs,
// e.g. after a long GC pause) can write one late snapshot after the new
// owner loaded; Kafka's generation check fences its commits, not its
// produces. Its snapshot only over-counts records it handed out itself.
//
// MemoryAttempts keeps the counts in the process only (for measuring the
// counter's cost); SQLAttempts keeps them in a SQLite database such as the
// catalog's (catalog.Store.DB()), for consumers that share one machine.
//
// # Headers
//
// Kafka header values are bytes. EncodeHeaders writes each typed Lily header
// as text a Kafka tool can read — decimal integers, "true"/"false", RFC 3339
// times, strings as UTF-8, bytes as they are — plus one header,
// x-lily-header-types, a JSON object from name to type code; DecodeHeaders
// gives back the Go types. So int32 x-retry-count round-trips as int32,
// and the non-canonical values of docs/design.md §7 (the string "0", a float64, a
// bool, a negative or too large int32) stay what they were and are
// dead-lettered with reason invalid_retry_count, raw value in the evidence.
// Headers written by other producers have no type entry and arrive as
// []byte, byte for byte (so evidence.DecodeForeign reads Spring Kafka's
// binary kafka_dlt-original-partition); only x-retry-count,
// x-lily-redrive-count and x-lily-schema-version in decimal text become
// int32.
//
// The canonical x-retry-count on Kafka (evidence.RetryCount) is therefore
// either type code "i32" in x-lily-header-types (what Lily writes) or, on a
// record of another producer, plain decimal text in 0..100 ("3"). Every
// other listed type code (i8, i16, i64, str, f64, ...) keeps its Go type and
// is refused as invalid_retry_count, as on AMQP only the long-int counts.
// The event ID and type
// travel as x-lily-event-id and x-lily-type; the key is the record key. A
// record without x-lily-event-id (another producer's) gets
// "<topic>/<partition>/<offset>" as its event ID.
//
// # Dead letters
//
// DrainDeadLetters reads <topic>.dlt (or the topic Options.DeadLetterTopics
// names for the queue: Spring Kafka's "<topic>.DLT" (DeadLetterPublishingRecoverer;
// "<topic>-dlt" with @RetryableTopic), a Kafka Connect or
// Kafka Streams dead letter queue) from where the drain group stopped,
// hands batches to the catalog, and commits the drain group's offsets only
// after the catalog committed. DeadLetterDepth counts what is not drained.
// Redrive is a Direct Publish (transport.PublishParams.Direct) to the
// queue's return topic <topic>.retry.0ms, never to the source topic: the
// queue's consumer group alone reads the return topic, while every other
// consumer group of the source topic (an indexer, an analytics sink) would
// receive the message a second time. Same key, so the same partition
// number. A Spring Kafka, Kafka Connect or Kafka Streams dead letter goes
// to the return topic of the topic its evidence names, in the partition it
// names (kafka_dlt-original-topic and -partition, __connect.errors.topic
// and .partition, ...) — and only when the consumer group that failed is
// Lily's group of that topic: a Spring listener's
// (kafka_dlt-original-consumer-group) or a Connect sink's
// ("connect-<connector>") is refused, since no topic reaches that group
// alone. A redirect (lily dlq redrive --to) goes to the target queue's
// return topic.
//
// # Ordering
//
// With ordering = "reorder" (the default) a record dead-lettered or
// retried lets later records of its key pass it. "park" and "block" are
// the runtime's, on the catalog (docs/design.md §4.9): the queue must be
// consumed through the ledger's wrapper (ledger.Account, which gives it
// Features.CatalogParking) with the catalog's held keys (redrive.Keys).
// On a log "block" holds the head's whole partition (held key
// "partition:N") until the head is redriven and processed or discarded;
// "park" diverts the key's later records into the catalog until an
// operator unparks it.
//
// # Share groups
//
// A queue with QueueSpec.ShareGroup (lily.QueueConfig.KafkaShareGroup,
// kafka_share_group in lily.toml) is consumed through a share group
// (KIP-932) instead: every member receives records of every partition, the
// broker locks each record while a member holds it and counts its
// deliveries, and Delivery.DeliveryCount is the broker's count — a record
// that kills its process is counted without the attempt counter. Ack is
// ACCEPT; a Retry or DeadLetter produces its copy (acks=all, confirmed)
// and then ACCEPTs the original (not REJECT: on a broker with KIP-1191's
// share-group dead-letter queue a REJECT would write a second copy without
// Lily's evidence); Release is RELEASE; the runtime's lease extension
// (LeaseExtender) is RENEW, and the member renews what it polled and did
// not hand out yet (QueueFeatures: the lease is Options.ShareLockDuration).
// franz-go accepts every record of a poll not acknowledged before the next
// poll, so a member polls only when everything of its last poll is
// settled. A poll's redeliveries but one are given back through the
// give-back topic (GiveBackTopic: copies carrying their counts), and the
// one runs alone; a redelivery also narrows the member — one record per
// fetch — until as many polls in a row as the topic has partitions brought
// only first-time deliveries, so that when a poison record kills the
// process it holds nothing else. A member starts wide
// (Options.ShareMaxRecords). Retry topics are
// still consumed by the queue's consumer group (DefaultGroup), paused until
// due. Lily sets share.auto.offset.reset = earliest on the group (Declare,
// and before a member first joins); a queue whose delivery_limit is not
// below the group's delivery limit (group.share.delivery.count.limit) is
// refused with transport.ErrUnsafeQueue: the broker would archive a record
// silently first. InFlight counts the share-partition lag, so a record
// the broker archived shows in the ledger as lost. Share groups keep no
// per-key order: ordering park and block are refused by the configuration.
//
// # What the tests on kfake cannot show
//
// The tests run on kfake, franz-go's in-process Kafka. They exercise the
// protocol as Lily uses it (groups, cooperative rebalances, static
// membership, commits, produce failures injected on one topic, compacted
// topics), but not: replication and min.insync.replicas (acks=all is
// acknowledged by the only replica; a leader failover that loses
// unreplicated writes cannot happen); log compaction running by itself
// (kfake compacts only when asked: a real cluster compacts <topic>.attempts
// in the background, which is what keeps its tail read short); retention
// deleting records; network latency (every round trip is in-process:
// BenchmarkConsume's rtt variants add 2ms by hand); session timeouts with
// real process pauses and zombie members; transactions written by others
// into a dead-letter topic; and real clients' quirks (Spring's header
// encodings are reproduced from its documentation in the tests).
//
// # Pointing Lily at a real cluster
//
// Open(ctx, Options{Brokers: ParseBrokers("kafka-1:9092,kafka-2:9092")}) —
// what the CLI's --brokers flag passes — with ClientOpts for TLS or SASL
// (kgo.DialTLSConfig, kgo.SASL). Create the topics with Declare (lily
// topology apply) or beforehand, with the same partition count for the main,
// retry, dead-letter and attempts topics, and a replication factor of 3 and
// min.insync.replicas of 2 for acks=all to mean what it says. Verify (lily
// topology verify) reports missing topics, partition counts other than
// planned and changed topic configs.
package kafka
