// Package catalog is the dead-letter work list: every dead letter with its
// original bytes, headers and evidence, its state and decisions, and the
// per-queue ledger that proves nothing was lost (DESIGN §9). The default
// store is SQLite, in the same database file as the embedded transport so
// that a dead-lettering is one transaction.
package catalog
