// Package ingest drains dead-letter queues into the catalog continuously:
// the ingest loop of 'lily serve', for any program that keeps a catalog.
//
// A Loop is given its sources by queue name — a transport's
// DeadLetterDrainer (a broker's dead-letter queue or topic), or a foreign
// dead-letter queue another framework fills — and drains each into the
// catalog every interval: catalog commit, then broker ack, so that a crash
// between the two ingests a dead letter twice into one entry, never loses
// it. Several replicas may run a Loop over one catalog: a lease per queue
// ("ingest/<queue>", renewed in every batch's transaction) lets exactly one
// drain each queue at a time, and a replica that dies hands over when its
// leases expire.
//
// The package knows no broker: package brokers opens the transports of a
// lily.toml (brokers.Set.Sources), and 'lily serve' wires the two
// together.
package ingest
