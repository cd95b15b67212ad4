package catalogdb

// The ledger's counters (lily_ledger) are raised by the SQLite transport in
// its own transactions and by package ledger in the catalog's: the
// statement is here, shared.

import (
	"context"
	"database/sql"
	"fmt"
)

// AddCountsTx adds to a queue's accepted and acked counters inside tx; the
// transport calls it in the same transaction that enqueues or acknowledges.
func AddCountsTx(ctx context.Context, tx *sql.Tx, queue string, accepted, acked int64) error {
	return AddCounts(ctx, SQLiteTx(tx), queue, accepted, acked)
}

// AddCounts adds to a queue's accepted and acked counters through q, a
// catalog transaction (e.g. an ingest of a foreign dead-letter queue, or
// package ledger's counting) or, on PostgreSQL, the handle: it is one
// upsert, which locks the queue's counter row and adds to its newest
// committed values, so it needs no other lock.
func AddCounts(ctx context.Context, q Querier, queue string, accepted, acked int64) error {
	_, err := q.ExecContext(ctx, addCountsSQL, queue, accepted, acked)
	if err != nil {
		return fmt.Errorf("catalog: ledger %s: %w", queue, err)
	}
	return nil
}

// addCountsSQL adds to a queue's accepted and acked counters (AddCountsTx,
// CountsAdder).
const addCountsSQL = `INSERT INTO lily_ledger(queue, accepted, acked) VALUES (?, ?, ?)
		ON CONFLICT(queue) DO UPDATE SET accepted = lily_ledger.accepted + excluded.accepted, acked = lily_ledger.acked + excluded.acked`

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
		return nil, fmt.Errorf("catalog: prepare ledger statement: %w (run catalogdb.Migrate on this database first)", err)
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

// LedgerCountsSQL returns the statement that reads every queue's accepted
// and acked counters: lily_ledger's on SQLite; on PostgreSQL lily_ledger's
// plus the per-writer deltas not folded yet (lily_ledger_deltas), summed
// in one statement, so one snapshot sees a fold either wholly or not at
// all.
func LedgerCountsSQL(d Dialect) string {
	if d != Postgres {
		return `SELECT queue, accepted, acked FROM lily_ledger`
	}
	return `SELECT queue, CAST(SUM(accepted) AS BIGINT), CAST(SUM(acked) AS BIGINT) FROM
		(SELECT queue, accepted, acked FROM lily_ledger UNION ALL SELECT queue, accepted, acked FROM lily_ledger_deltas) c
		GROUP BY queue`
}

// FoldLedgerDeltasSQL moves PostgreSQL's per-writer counters into
// lily_ledger in one statement (so a reader sees them in one place or the
// other, never both, never neither); it keeps lily_ledger_deltas small.
// A delta row a writer raises meanwhile is either deleted with its newest
// value (DELETE waits for the writer's row lock and deletes the committed
// version) or inserted again after the fold.
const FoldLedgerDeltasSQL = `WITH d AS (DELETE FROM lily_ledger_deltas RETURNING queue, accepted, acked),
	s AS (SELECT queue, SUM(accepted) AS accepted, SUM(acked) AS acked FROM d GROUP BY queue)
	INSERT INTO lily_ledger(queue, accepted, acked) SELECT queue, accepted, acked FROM s
	ON CONFLICT (queue) DO UPDATE SET accepted = lily_ledger.accepted + excluded.accepted, acked = lily_ledger.acked + excluded.acked`
