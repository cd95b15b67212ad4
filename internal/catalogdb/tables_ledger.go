package catalogdb

// The tables package ledger adds to the first release's lily_ledger and
// lily_ledger_events (tables_catalog.go): what pruning needs.

// ledgerPruneSchema adds what pruning needs: an index by age, and the
// record of what was pruned per queue and kind (events: rows deleted;
// through: the latest cutoff, Unix ms — rows older than it are gone).
const ledgerPruneSchema = `
CREATE INDEX IF NOT EXISTS lily_ledger_events_at ON lily_ledger_events(at);
CREATE TABLE IF NOT EXISTS lily_ledger_pruned (
	queue   TEXT    NOT NULL,
	kind    TEXT    NOT NULL,
	events  INTEGER NOT NULL DEFAULT 0,
	through INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (queue, kind)
);
`
