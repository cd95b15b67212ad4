// Package catalogdb is the catalog's SQL layer: the database handle with
// its dialect (SQLite or PostgreSQL), transactions, the schema and its
// migrations, and the row writers that more than one package needs — the
// entry inserter, the ledger's counters, the audit log.
//
// Every package that reads or writes the catalog's tables goes through it:
// package catalog (the store of entries and the decisions on them), ledger,
// redrive and rules, which are layered on the store and run their own
// statements on its database, and the SQLite transport, which dead-letters
// a message and counts its ledger in the transaction that removes it from
// its queue. It imports neither a PostgreSQL driver nor the consumer
// runtime, so that the embedded transport links neither.
//
// Statements are written once, with `?` placeholders, in the subset of SQL
// both stores share; DB and Tx rebind them to the dialect. The tables are
// created here, all of them, by Migrate (SQLite) and MigratePostgres
// (versioned steps); each is read and written by the package its comment
// names.
//
// The rows this package writes are the public types of package catalog:
// catalog.Entry, catalog.State and catalog.AuditRecord are aliases of
// Entry, State and AuditRecord, one type shared by the store and by the
// SQLite transport.
package catalogdb
