// Package catalog is the dead-letter work list: the store of every dead
// letter with its original bytes, headers and evidence, and the decisions
// on them — list, group, search, discard, erase, expire, edit, triage,
// export and import, each recorded in the append-only audit log (docs/design.md
// §9). The default store is SQLite, in the same database file as the
// embedded transport so that a dead-lettering is one transaction; a fleet
// shares one PostgreSQL store (Open, OpenPostgres).
//
// The catalog's other jobs are packages of their own, layered on a *Store:
//
//   - catalog/where: the --where language of Filter.Where;
//   - ledger: the conservation ledger and the transport wrapper that counts
//     a broker's messages (ledger.Account);
//   - redrive: redrive, redrive jobs and the held keys of ordered queues;
//   - redrive/rules: rule-driven redrive and the runtime hook that records
//     its triggers.
//
// They share the store's SQL layer, internal/catalogdb, which holds the
// schema of every table, the dialects and the row writers; the SQLite
// transport uses that layer alone.
package catalog
