package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// bareSplitSchema keeps the lease state in a narrow table and the body in
// another, so that a lease rewrites a ~30-byte row instead of the row that
// holds the body.
const bareSplitSchema = `
CREATE TABLE q (
	id            INTEGER PRIMARY KEY,
	queue         TEXT    NOT NULL,
	visible_at    INTEGER NOT NULL,
	receive_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX q_ready ON q(queue, visible_at, id);
CREATE TABLE qb (
	id   INTEGER PRIMARY KEY,
	body BLOB NOT NULL
);
`

// RunBareSQLSplit is an experiment beside the ceiling (not a design
// figure): the same one-goroutine loop as RunBareSQL, but the lease moves
// visible_at in a narrow table and reads the bodies from a second table by
// id; enqueue and delete touch both tables in the same transaction.
func RunBareSQLSplit(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	db, cleanup, err := openDB(ctx, c, "bare-split", bareSplitSchema)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	// Statements are prepared on the *sql.DB (one connection): Tx.StmtContext
	// reuses such a statement, but re-prepares one made on a *sql.Conn.
	const leaseSQL = `UPDATE q SET visible_at = ?, receive_count = receive_count + 1
		WHERE id IN (SELECT id FROM q WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, id LIMIT ?)
		RETURNING id`
	type stmts struct{ insQ, insB, lease, sel, delQ, delB *sql.Stmt }
	closeAll := func(s *stmts) {
		for _, st := range []*sql.Stmt{s.insQ, s.insB, s.lease, s.sel, s.delQ, s.delB} {
			if st != nil {
				st.Close()
			}
		}
	}
	prepare := func(n int) (*stmts, error) {
		s := new(stmts)
		for _, p := range []struct {
			dst **sql.Stmt
			sql string
		}{
			{&s.insQ, `INSERT INTO q(id, queue, visible_at) VALUES ` + tuples(n, 3)},
			{&s.insB, `INSERT INTO qb(id, body) VALUES ` + tuples(n, 2)},
			{&s.lease, leaseSQL},
			{&s.sel, `SELECT id, body FROM qb WHERE id IN (` + placeholders(n) + `)`},
			{&s.delQ, `DELETE FROM q WHERE id IN (` + placeholders(n) + `)`},
			{&s.delB, `DELETE FROM qb WHERE id IN (` + placeholders(n) + `)`},
		} {
			var err error
			if *p.dst, err = db.PrepareContext(ctx, p.sql); err != nil {
				closeAll(s)
				return nil, err
			}
		}
		return s, nil
	}
	// The statements for a full batch and, when N is not a multiple of
	// Batch, for the short last batch are prepared before the clock starts.
	full, err := prepare(c.Batch)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(full)
	last := full
	if r := c.N % c.Batch; r != 0 {
		if last, err = prepare(r); err != nil {
			return Result{}, err
		}
		defer closeAll(last)
	}
	bodies := makeBodies(c)
	tr := newTracker(c.N)
	argsQ := make([]any, 0, 3*c.Batch)
	argsB := make([]any, 0, 2*c.Batch)
	ids := make([]any, 0, c.Batch)
	m := startMeter()
	for i := 0; i < c.N; i += c.Batch {
		batch := bodies[i:min(i+c.Batch, c.N)]
		st := full
		if len(batch) != c.Batch {
			st = last
		}
		now := time.Now().UnixMilli()
		argsQ, argsB = argsQ[:0], argsB[:0]
		for j, b := range batch {
			id := int64(i + j + 1)
			argsQ = append(argsQ, id, "bench", now)
			argsB = append(argsB, id, b)
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.StmtContext(ctx, st.insB).ExecContext(ctx, argsB...); err != nil {
				return err
			}
			_, err := tx.StmtContext(ctx, st.insQ).ExecContext(ctx, argsQ...)
			return err
		}); err != nil {
			return Result{}, fmt.Errorf("bare sql split: enqueue: %w", err)
		}
		ids = ids[:0]
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			now := time.Now().UnixMilli()
			rows, err := tx.StmtContext(ctx, st.lease).QueryContext(ctx, now+30000, "bench", now, len(batch))
			if err != nil {
				return err
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) != len(batch) {
				return fmt.Errorf("leased %d of %d", len(ids), len(batch))
			}
			rows, err = tx.StmtContext(ctx, st.sel).QueryContext(ctx, ids...)
			if err != nil {
				return err
			}
			return consumeRows(rows, tr, nil)
		}); err != nil {
			return Result{}, fmt.Errorf("bare sql split: lease: %w", err)
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.StmtContext(ctx, st.delB).ExecContext(ctx, ids...); err != nil {
				return err
			}
			res, err := tx.StmtContext(ctx, st.delQ).ExecContext(ctx, ids...)
			if err != nil {
				return err
			}
			return checkDeleted(res, len(ids))
		}); err != nil {
			return Result{}, fmt.Errorf("bare sql split: delete: %w", err)
		}
		tr.acked(int64(len(ids)))
	}
	res := m.stop()
	if err := errors.Join(tr.check(), checkSplitEmpty(ctx, db)); err != nil {
		return Result{}, fmt.Errorf("bare sql split: %w", err)
	}
	return res.done("bare SQL, split lease/body tables (experiment)", c.N,
		fmt.Sprintf("as bare SQL, but the lease updates a narrow table and reads bodies by id from a second; %d-row transactions", c.Batch)), nil
}

// checkSplitEmpty fails unless both tables of the split schema are empty.
func checkSplitEmpty(ctx context.Context, db *sql.DB) error {
	var left, leftB int64
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM q), (SELECT COUNT(*) FROM qb)`).Scan(&left, &leftB); err != nil {
		return err
	}
	if left != 0 || leftB != 0 {
		return fmt.Errorf("conservation: %d lease rows and %d bodies left", left, leftB)
	}
	return nil
}
