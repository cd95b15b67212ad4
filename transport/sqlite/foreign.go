package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Rows that enter a queue without lily.Publish.
//
// Other programs may insert into lily_messages with plain SQL (the table is
// the queue; docs/design.md §7 "identity of messages Lily did not publish"). Lily
// counts such a row as accepted in the ledger, and gives it an event ID
// when it has none, in the same transaction that inserts it, through the
// trigger below:
//
//   - the column accounted is 1 on every row Lily writes (Publish,
//     PublishTx, a retry copy, a redrive) — Lily counts those itself — and
//     0 (its default) on a row another program inserts without naming it;
//   - the trigger lily_messages_foreign fires on a row inserted with
//     accounted = 0: it adds 1 to the queue's accepted counter, sets
//     accounted = 1, and, when event_id is ”, sets it to
//     "sqlite-<row id>-<enqueued_at>" — the row's coordinates, stable for
//     the message's whole life here: every redelivery is the same row, and
//     a retry copy or a dead letter copies the event ID.
//
// So a queue fed by raw SQL balances like one fed by Publish, and a row
// that disappears without an ack or a dead letter shows as lost.
//
// The trigger's body makes sure the ledger row exists (INSERT OR IGNORE)
// and then raises its counter, rather than one upsert: an upsert's DO
// UPDATE may abort whatever the outer statement's conflict clause, and a
// trigger that may abort makes every multi-row INSERT into lily_messages —
// Lily's own, on which the trigger never fires — keep a statement journal
// of the pages the transaction wrote before it (copied, and spilled to a
// temporary file past 64 KiB; see insertPrefix in stmts.go).
const foreignTrigger = `CREATE TRIGGER lily_messages_foreign AFTER INSERT ON lily_messages
WHEN NEW.accounted = 0
BEGIN
	INSERT OR IGNORE INTO lily_ledger(queue, accepted, acked) VALUES (NEW.queue, 0, 0);
	UPDATE lily_ledger SET accepted = accepted + 1 WHERE queue = NEW.queue;
	UPDATE lily_messages SET accounted = 1,
		event_id = CASE WHEN NEW.event_id = '' THEN 'sqlite-' || NEW.id || '-' || NEW.enqueued_at ELSE NEW.event_id END
		WHERE id = NEW.id;
END`

// migrateForeign adds the accounted column (existing rows were counted
// when Lily wrote them: they get 1) and the trigger, in one transaction.
func migrateForeign(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite transport: migrate: %w", err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('lily_messages') WHERE name = 'accounted'`).Scan(&n); err != nil {
		return fmt.Errorf("sqlite transport: inspect schema: %w", err)
	}
	if n == 0 {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE lily_messages ADD COLUMN accounted INTEGER NOT NULL DEFAULT 0`); err != nil &&
			!strings.Contains(err.Error(), "duplicate column") {
			return fmt.Errorf("sqlite transport: add column accounted: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE lily_messages SET accounted = 1`); err != nil {
			return fmt.Errorf("sqlite transport: mark existing messages accounted: %w", err)
		}
	}
	// The trigger is replaced only when it differs (a database made before
	// the body above): a schema change makes every connection to the file
	// prepare its statements again.
	var have string
	err = tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'lily_messages_foreign'`).Scan(&have)
	switch {
	case err == nil && have == foreignTrigger:
		return tx.Commit()
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sqlite transport: inspect trigger: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DROP TRIGGER IF EXISTS lily_messages_foreign`); err != nil {
		return fmt.Errorf("sqlite transport: replace trigger: %w", err)
	}
	if _, err := tx.ExecContext(ctx, foreignTrigger); err != nil {
		return fmt.Errorf("sqlite transport: create trigger: %w", err)
	}
	return tx.Commit()
}
