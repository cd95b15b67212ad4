package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// bareSchema is the least a lease-based queue needs: a body, a visibility
// time that the lease moves (SQS-style, docs/design.md §8), a receive count, and
// the ready index (queue, visible_at, id).
const bareSchema = `
CREATE TABLE q (
	id            INTEGER PRIMARY KEY,
	queue         TEXT    NOT NULL,
	body          BLOB    NOT NULL,
	visible_at    INTEGER NOT NULL,
	receive_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX q_ready ON q(queue, visible_at, id);
`

// RunBareSQL measures the "bare SQL ceiling" of docs/design.md §12 on one
// goroutine, with no runtime and no transport: per Batch messages, one
// transaction enqueues them (one multi-row INSERT), one leases them (UPDATE
// ... WHERE id IN (SELECT ... ORDER BY visible_at, id LIMIT Batch)
// RETURNING id, body, moving visible_at and incrementing receive_count), and
// one deletes them (one DELETE ... WHERE id IN (...)). WAL, synchronous
// FULL, the same DSN as Lily.
func RunBareSQL(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	db, cleanup, err := openDB(ctx, c, "bare", bareSchema)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	// Statements are prepared on the *sql.DB (one connection): Tx.StmtContext
	// reuses such a statement, but re-prepares one made on a *sql.Conn.
	insertSQL := func(n int) string {
		return `INSERT INTO q(queue, body, visible_at) VALUES ` + tuples(n, 3)
	}
	const leaseSQL = `UPDATE q SET visible_at = ?, receive_count = receive_count + 1
		WHERE id IN (SELECT id FROM q WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, id LIMIT ?)
		RETURNING id, body`
	deleteSQL := func(n int) string {
		return `DELETE FROM q WHERE id IN (` + placeholders(n) + `)`
	}
	ins, err := db.PrepareContext(ctx, insertSQL(c.Batch))
	if err != nil {
		return Result{}, err
	}
	defer ins.Close()
	lease, err := db.PrepareContext(ctx, leaseSQL)
	if err != nil {
		return Result{}, err
	}
	defer lease.Close()
	del, err := db.PrepareContext(ctx, deleteSQL(c.Batch))
	if err != nil {
		return Result{}, err
	}
	defer del.Close()

	bodies := makeBodies(c)
	tr := newTracker(c.N)
	args := make([]any, 0, 3*c.Batch)
	ids := make([]any, 0, c.Batch)
	m := startMeter()
	for i := 0; i < c.N; i += c.Batch {
		batch := bodies[i:min(i+c.Batch, c.N)]
		now := time.Now().UnixMilli()
		args = args[:0]
		for _, b := range batch {
			args = append(args, "bench", b, now)
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			_, err := execBatch(ctx, tx, ins, insertSQL, len(batch), c.Batch, args)
			return err
		}); err != nil {
			return Result{}, fmt.Errorf("bare sql: enqueue: %w", err)
		}
		ids = ids[:0]
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			now := time.Now().UnixMilli()
			rows, err := tx.StmtContext(ctx, lease).QueryContext(ctx, now+30000, "bench", now, len(batch))
			if err != nil {
				return err
			}
			return consumeRows(rows, tr, &ids)
		}); err != nil {
			return Result{}, fmt.Errorf("bare sql: lease: %w", err)
		}
		if len(ids) != len(batch) {
			return Result{}, fmt.Errorf("bare sql: leased %d of %d", len(ids), len(batch))
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			res, err := execBatch(ctx, tx, del, deleteSQL, len(ids), c.Batch, ids)
			if err != nil {
				return err
			}
			return checkDeleted(res, len(ids))
		}); err != nil {
			return Result{}, fmt.Errorf("bare sql: delete: %w", err)
		}
		tr.acked(int64(len(ids)))
	}
	res := m.stop()
	if err := errors.Join(tr.check(), checkEmpty(ctx, db, `SELECT COUNT(*) FROM q`, "rows left")); err != nil {
		return Result{}, fmt.Errorf("bare sql: %w", err)
	}
	return res.done("bare SQL ceiling", c.N,
		fmt.Sprintf("1 goroutine, %d-row transactions: INSERT; UPDATE..RETURNING lease; DELETE", c.Batch)), nil
}

// checkDeleted fails unless res deleted want rows.
func checkDeleted(res sql.Result, want int) error {
	if n, _ := res.RowsAffected(); n != int64(want) {
		return fmt.Errorf("deleted %d of %d", n, want)
	}
	return nil
}
