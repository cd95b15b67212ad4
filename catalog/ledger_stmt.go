package catalog

import (
	"context"
	"database/sql"
	"fmt"
)

// addCountsSQL adds to a queue's accepted and acked counters (AddCountsTx,
// CountsAdder).
const addCountsSQL = `INSERT INTO lily_ledger(queue, accepted, acked) VALUES (?, ?, ?)
		ON CONFLICT(queue) DO UPDATE SET accepted = lily_ledger.accepted + excluded.accepted, acked = lily_ledger.acked + excluded.acked`

// The per-event rows keep one row per message identity: kind "accepted"
// from when it is counted accepted, turned into kind "acked" (at: the ack)
// when it is counted acked — so an acked message is known as accepted
// too, and the ledger keeps one row per message, not two. A message acked
// without an accepted row (accepted before its row was pruned, or rows of
// an earlier Lily that kept two) gets an "acked" row of its own.

// countAcceptedSQL records (queue, "accepted", key, at) unless the key or
// its bare event ID (legacy: a row of an older Lily) is recorded as
// accepted or acked already; RowsAffected tells whether it did. The select
// list is cast so that PostgreSQL knows the parameters' types. Arguments:
// queue, key, at, queue, key, legacy.
const countAcceptedSQL = `INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT CAST(? AS TEXT), 'accepted', CAST(? AS TEXT), CAST(? AS BIGINT)
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger_events WHERE queue = ? AND kind IN ('accepted', 'acked') AND event_id IN (?, ?))
		ON CONFLICT DO NOTHING`

// ackAcceptedSQL turns the key's accepted row into its acked row, unless
// it (or its bare event ID) has one already. Arguments: at, queue, key,
// queue, key, legacy.
const ackAcceptedSQL = `UPDATE lily_ledger_events SET kind = 'acked', at = ?
		WHERE queue = ? AND kind = 'accepted' AND event_id = ?
		AND NOT EXISTS (SELECT 1 FROM lily_ledger_events e WHERE e.queue = ? AND e.kind = 'acked' AND e.event_id IN (?, ?))`

// countAckedSQL records (queue, "acked", key, at) for a key without an
// accepted row, unless the key or its bare event ID is recorded as acked
// already. Arguments: queue, key, at, queue, key, legacy.
const countAckedSQL = `INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT CAST(? AS TEXT), 'acked', CAST(? AS TEXT), CAST(? AS BIGINT)
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger_events WHERE queue = ? AND kind = 'acked' AND event_id IN (?, ?))
		ON CONFLICT DO NOTHING`

// CountsAdder is AddCountsTx with its statement prepared once, for a
// transport that updates the ledger in every publish and settle
// transaction. It must be prepared on the *sql.DB itself (not a Conn or a
// Tx): only then does Tx.StmtContext reuse the parsed statement instead of
// preparing it again.
type CountsAdder struct {
	stmt *sql.Stmt
}

// PrepareCountsAdder prepares the ledger statement on db; the ledger table
// must exist (Migrate). Close releases it.
func PrepareCountsAdder(ctx context.Context, db *sql.DB) (*CountsAdder, error) {
	st, err := db.PrepareContext(ctx, addCountsSQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: prepare ledger statement: %w (run catalog.Migrate on this database first)", err)
	}
	return &CountsAdder{stmt: st}, nil
}

// AddTx adds to queue's accepted and acked counters inside tx, as
// AddCountsTx does; tx must belong to the database the adder was prepared
// on.
func (a *CountsAdder) AddTx(ctx context.Context, tx *sql.Tx, queue string, accepted, acked int64) error {
	if _, err := tx.StmtContext(ctx, a.stmt).ExecContext(ctx, queue, accepted, acked); err != nil {
		return fmt.Errorf("catalog: ledger %s: %w", queue, err)
	}
	return nil
}

// Close releases the prepared statement.
func (a *CountsAdder) Close() error { return a.stmt.Close() }
