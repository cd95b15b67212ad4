// Package catalog is the dead-letter work list: every dead letter with its
// original bytes, headers and evidence, its state and decisions, and the
// per-queue ledger that proves nothing was lost (DESIGN §9). The default
// store is SQLite, in the same database file as the embedded transport so
// that a dead-lettering is one transaction.
package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// schema creates the catalog tables. Times are Unix milliseconds (UTC).
const schema = `
CREATE TABLE IF NOT EXISTS lily_dlq_entries (
	id               INTEGER PRIMARY KEY,
	queue            TEXT    NOT NULL,
	event_id         TEXT    NOT NULL,
	msg_key          TEXT    NOT NULL DEFAULT '',
	msg_type         TEXT    NOT NULL DEFAULT '',
	body             BLOB,
	headers          BLOB,
	body_sha256      TEXT    NOT NULL,
	reason           TEXT    NOT NULL,
	error_type       TEXT    NOT NULL DEFAULT '',
	error_message    TEXT    NOT NULL DEFAULT '',
	fingerprint      TEXT    NOT NULL DEFAULT '',
	consumer_version TEXT    NOT NULL DEFAULT '',
	source           TEXT    NOT NULL DEFAULT '',
	delivery_count   INTEGER NOT NULL DEFAULT 0,
	retry_count      INTEGER NOT NULL DEFAULT 0,
	redrive_count    INTEGER NOT NULL DEFAULT 0,
	state            TEXT    NOT NULL DEFAULT 'pending',
	dead_lettered_at INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	-- dl_key identifies one dead-lettering of one message, so that
	-- ingesting the same broker dead letter twice adds one entry.
	dl_key           TEXT,
	-- duplicates counts further copies of the same dead-lettering that an
	-- at-least-once hand-off delivered (the copy was confirmed, the
	-- original's ack was lost, the message was dead-lettered again).
	duplicates       INTEGER NOT NULL DEFAULT 0,
	-- The last decision about the entry (redrive, discard, erase, expire,
	-- needs_manual): when, who and why. Every decision is also in lily_audit.
	decided_at       INTEGER,
	decided_by       TEXT    NOT NULL DEFAULT '',
	decision         TEXT    NOT NULL DEFAULT '',
	-- erased_at is set when the body and headers were removed (lily dlq
	-- erase): the row stays as a tombstone.
	erased_at        INTEGER,
	-- hold_key is, for a parked entry, the held key it waits behind: the
	-- message key, or "partition:N" when ordering block holds a partition.
	hold_key         TEXT    NOT NULL DEFAULT '',
	-- source_coords locates the failed copy inside its source, where the
	-- transport has coordinates ("p<partition>/o<offset>" on a log; empty
	-- on a queue). With the event ID, the body hash and the source it
	-- decides whether two dead letters are the same dead-lettering.
	source_coords    TEXT    NOT NULL DEFAULT '',
	-- body_size and headers_size keep the sizes in bytes when the body and
	-- headers are removed (erase, discard, expire); NULL while they are
	-- there (their LENGTH is the size).
	body_size        INTEGER,
	headers_size     INTEGER
);
CREATE TABLE IF NOT EXISTS lily_ledger (
	queue    TEXT PRIMARY KEY,
	accepted INTEGER NOT NULL DEFAULT 0,
	acked    INTEGER NOT NULL DEFAULT 0
);
-- For broker transports, accepted and acked are counted once per message
-- identity (ledgerKey: the event ID and a digest of the body): a
-- redelivered message acked twice, or a redriven message published again,
-- is not counted again, while two different bodies that share an event ID
-- count as two messages. Rows written by an older Lily hold the bare
-- event ID and still match it.
CREATE TABLE IF NOT EXISTS lily_ledger_events (
	queue    TEXT    NOT NULL,
	kind     TEXT    NOT NULL,
	event_id TEXT    NOT NULL,
	at       INTEGER NOT NULL,
	PRIMARY KEY (queue, kind, event_id)
) WITHOUT ROWID;
`

// addedColumns are the entry columns added after the first release of the
// table: Migrate adds them to an older database file.
var addedColumns = []struct{ name, decl string }{
	{"decided_at", "INTEGER"},
	{"decided_by", "TEXT NOT NULL DEFAULT ''"},
	{"decision", "TEXT NOT NULL DEFAULT ''"},
	{"erased_at", "INTEGER"},
	{"hold_key", "TEXT NOT NULL DEFAULT ''"},
	// Dedup by the same dead-lettering (event ID, body, source and its
	// coordinates), not by the event ID alone: entries of an older file
	// get '' (no coordinates), which only ever keeps more entries apart.
	{"source_coords", "TEXT NOT NULL DEFAULT ''"},
	// Discard and expire remove the data and keep its sizes.
	{"body_size", "INTEGER"},
	{"headers_size", "INTEGER"},
	// A redrive --to another queue records the queue it went to: the
	// ledger counts the entry as redirected out of its source.
	{"redirected_to", "TEXT NOT NULL DEFAULT ''"},
}

// indexes serve the work-list queries: paging by queue and state (redrive,
// discard, expire, list), lookups by event ID (observe, duplicates), and
// one covering index per grouping column so that 'lily dlq group' reads an
// index in order instead of sorting the table.
const indexes = `
CREATE UNIQUE INDEX IF NOT EXISTS lily_dlq_entries_dl_key ON lily_dlq_entries(dl_key) WHERE dl_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS lily_dlq_entries_queue_state ON lily_dlq_entries(queue, state, id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_event ON lily_dlq_entries(event_id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_state_id ON lily_dlq_entries(state, id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_time ON lily_dlq_entries(queue, state, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_queue_time ON lily_dlq_entries(queue, dead_lettered_at);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_key ON lily_dlq_entries(msg_key);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_reason ON lily_dlq_entries(reason, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_error_type ON lily_dlq_entries(error_type, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_fingerprint ON lily_dlq_entries(fingerprint, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_consumer_version ON lily_dlq_entries(consumer_version, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_source ON lily_dlq_entries(source, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
`

// Migrate creates the catalog tables in db if they do not exist, and adds
// the columns and indexes a database file made by an older Lily lacks.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("catalog: create schema: %w", err)
	}
	have := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info('lily_dlq_entries')`)
	if err != nil {
		return fmt.Errorf("catalog: inspect schema: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		have[n] = true
	}
	rows.Close()
	for _, c := range addedColumns {
		if have[c.name] {
			continue
		}
		// Another process may add it at the same time: a duplicate is fine.
		if _, err := db.ExecContext(ctx, `ALTER TABLE lily_dlq_entries ADD COLUMN `+c.name+` `+c.decl); err != nil &&
			!strings.Contains(err.Error(), "duplicate column") {
			return fmt.Errorf("catalog: add column %s: %w", c.name, err)
		}
	}
	if _, err := db.ExecContext(ctx, indexes+auditSchema+keySchema+leaseSchema+jobsSchema+ledgerPruneSchema+triageSchema+searchSchema+editSchema+ruleSchema+foreignSchema); err != nil {
		return fmt.Errorf("catalog: create indexes: %w", err)
	}
	if err := migrateRedirect(ctx, db); err != nil {
		return err
	}
	if err := migrateSchemaVersion(ctx, db); err != nil {
		return err
	}
	return backfillSearch(ctx, &handle{DB: db, d: dialectSQLite})
}
