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
	duplicates       INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS lily_dlq_entries_dl_key ON lily_dlq_entries(dl_key) WHERE dl_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS lily_dlq_entries_queue_state ON lily_dlq_entries(queue, state, id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_event ON lily_dlq_entries(event_id);
CREATE TABLE IF NOT EXISTS lily_ledger (
	queue    TEXT PRIMARY KEY,
	accepted INTEGER NOT NULL DEFAULT 0,
	acked    INTEGER NOT NULL DEFAULT 0
);
-- For broker transports, accepted and acked are counted once per event
-- ID: a redelivered message acked twice, or a redriven message published
-- again, is not counted again.
CREATE TABLE IF NOT EXISTS lily_ledger_events (
	queue    TEXT    NOT NULL,
	kind     TEXT    NOT NULL,
	event_id TEXT    NOT NULL,
	at       INTEGER NOT NULL,
	PRIMARY KEY (queue, kind, event_id)
) WITHOUT ROWID;
`

// Migrate creates the catalog tables in db if they do not exist.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("catalog: create schema: %w", err)
	}
	return nil
}
