package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lily-mq/lily"
)

// RunLilyShapes is an experiment (not part of the comparison): the raw
// loop of RunLilyRaw — same goroutine structure, same batches — on Lily's
// own schema and with the same semantics as the transport (queue check and
// ledger row in the publish and settle transactions; lease moves
// visible_at, increments receive_count, sets lease_owner and returns every
// column; redeliveries isolated; each ack fenced by the receive count it
// was leased with), but with other statement shapes:
//
//   - every statement is prepared once per connection (the transport
//     prepares its 100-row INSERT and its settle DELETE once per
//     transaction, and re-parses the lease UPDATE, whose IN list changes
//     length, on every call);
//   - the lease UPDATE has one fixed shape: it re-runs the candidate query
//     with LIMIT k (the isolated prefix length) inside the same immediate
//     transaction instead of listing the ids;
//   - the acks of a settle batch are fenced DELETEs by (id, receive_count)
//     through the one statement prepared for the connection (see
//     RunLilyShapesJSONAck for a single-statement variant).
//
// It measures what these shapes would give the transport, without editing
// it.
func RunLilyShapes(ctx context.Context, c Config) (Result, error) {
	return runLilyShapes(ctx, c, false)
}

// RunLilyShapesJSONAck is RunLilyShapes with the acks of a settle batch as
// one DELETE whose (id, receive_count) pairs come from one JSON array
// parameter (RETURNING id to find a lost lease), instead of one prepared
// DELETE per ack.
func RunLilyShapesJSONAck(ctx context.Context, c Config) (Result, error) {
	return runLilyShapes(ctx, c, true)
}

func runLilyShapes(ctx context.Context, c Config, ackJSON bool) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	t, cleanup, err := openLily(ctx, c, "shapes")
	if err != nil {
		return Result{}, err
	}
	defer cleanup()
	// Statements are prepared on the *sql.DB (one connection): Tx.StmtContext
	// reuses such a statement, but re-prepares one made on a *sql.Conn.
	db := t.DB()

	insertSQL := func(n int) string {
		return `INSERT INTO lily_messages(queue, event_id, msg_key, msg_type, body, headers, visible_at, enqueued_at, accounted) VALUES ` +
			tuples(n, 9)
	}
	const (
		checkSQL  = `SELECT 1 FROM lily_queues WHERE name = ?`
		ledgerSQL = `INSERT INTO lily_ledger(queue, accepted, acked) VALUES (?, ?, ?)
			ON CONFLICT(queue) DO UPDATE SET accepted = accepted + excluded.accepted, acked = acked + excluded.acked`
		candSQL = `SELECT id, receive_count FROM lily_messages
			WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, id LIMIT ?`
		leaseSQL = `UPDATE lily_messages
			SET visible_at = ?, receive_count = receive_count + 1, lease_owner = ?
			WHERE id IN (SELECT id FROM lily_messages WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, id LIMIT ?)
			RETURNING id, event_id, msg_key, msg_type, body, headers, receive_count, enqueued_at`
		ackSQL = `DELETE FROM lily_messages
			WHERE (id, receive_count) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))
			RETURNING id`
		ackRowSQL = `DELETE FROM lily_messages WHERE id = ? AND receive_count = ?`
	)
	var stCheck, stLedger, stCand, stLease, stAck, stAckRow, stInsert *sql.Stmt
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&stCheck, checkSQL}, {&stLedger, ledgerSQL}, {&stCand, candSQL},
		{&stLease, leaseSQL}, {&stAck, ackSQL}, {&stAckRow, ackRowSQL}, {&stInsert, insertSQL(c.Batch)},
	} {
		if *p.dst, err = db.PrepareContext(ctx, p.q); err != nil {
			return Result{}, fmt.Errorf("lily shapes: prepare: %w", err)
		}
		defer (*p.dst).Close()
	}

	type leased struct {
		id, count int64
		eventID   string
		body      []byte
	}
	tr := newTracker(c.N)
	bodies := makeBodies(c)
	args := make([]any, 0, 8*c.Batch)
	var got []leased
	pairs := make([][2]int64, 0, c.Batch)
	const owner = "lilybench-shapes"
	m := startMeter()
	for i := 0; i < c.N; i += c.Batch {
		batch := bodies[i:min(i+c.Batch, c.N)]
		now := time.Now().UnixMilli()
		args = args[:0]
		for _, b := range batch {
			var hdr []byte // no headers, as in the other runs
			args = append(args, lilyQueue, lily.NewEventID(), "", "bench", b, hdr, now, now, 1)
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			var one int
			if err := tx.StmtContext(ctx, stCheck).QueryRowContext(ctx, lilyQueue).Scan(&one); err != nil {
				return err
			}
			_, err := execBatch(ctx, tx, stInsert, insertSQL, len(batch), c.Batch, args)
			if err != nil {
				return err
			}
			_, err = tx.StmtContext(ctx, stLedger).ExecContext(ctx, lilyQueue, len(batch), 0)
			return err
		}); err != nil {
			return Result{}, fmt.Errorf("lily shapes: publish: %w", err)
		}
		for done := 0; done < len(batch); {
			got = got[:0]
			if err := inTx(ctx, db, func(tx *sql.Tx) error {
				now := time.Now().UnixMilli()
				rows, err := tx.StmtContext(ctx, stCand).QueryContext(ctx, lilyQueue, now, c.Batch)
				if err != nil {
					return err
				}
				k, first := 0, true
				for rows.Next() {
					var id, count int64
					if err := rows.Scan(&id, &count); err != nil {
						rows.Close()
						return err
					}
					// isolate: a redelivered head alone, else the
					// first-time prefix.
					if first && count > 0 {
						k = 1
						break
					}
					first = false
					if count > 0 {
						break
					}
					k++
				}
				rows.Close()
				if err := rows.Err(); err != nil || k == 0 {
					return err
				}
				rows, err = tx.StmtContext(ctx, stLease).QueryContext(ctx, now+30000, owner, lilyQueue, now, k)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var (
						l            leased
						key, typ     string
						hdr          []byte
						enqueuedAtMs int64
					)
					if err := rows.Scan(&l.id, &l.eventID, &key, &typ, &l.body, &hdr, &l.count, &enqueuedAtMs); err != nil {
						return err
					}
					got = append(got, l)
				}
				return rows.Err()
			}); err != nil {
				return Result{}, fmt.Errorf("lily shapes: lease: %w", err)
			}
			if len(got) == 0 {
				return Result{}, errors.New("lily shapes: lease: nothing ready")
			}
			// RETURNING order is unspecified; candidates are in (visible_at,
			// id) order and a batch shares visible_at, so sort by id.
			sort.Slice(got, func(a, b int) bool { return got[a].id < got[b].id })
			pairs = pairs[:0]
			for _, l := range got {
				tr.consumed(l.body)
				pairs = append(pairs, [2]int64{l.id, l.count})
			}
			var js []byte
			if ackJSON {
				if js, err = json.Marshal(pairs); err != nil {
					return Result{}, err
				}
			}
			if err := inTx(ctx, db, func(tx *sql.Tx) error {
				var n int64
				if ackJSON {
					rows, err := tx.StmtContext(ctx, stAck).QueryContext(ctx, string(js))
					if err != nil {
						return err
					}
					for rows.Next() {
						n++
					}
					rows.Close()
					if err := rows.Err(); err != nil {
						return err
					}
				} else {
					del := tx.StmtContext(ctx, stAckRow)
					for _, p := range pairs {
						res, err := del.ExecContext(ctx, p[0], p[1])
						if err != nil {
							return err
						}
						k, _ := res.RowsAffected()
						n += k
					}
				}
				if n != int64(len(pairs)) {
					return fmt.Errorf("acked %d of %d (lease lost)", n, len(pairs))
				}
				_, err = tx.StmtContext(ctx, stLedger).ExecContext(ctx, lilyQueue, 0, n)
				return err
			}); err != nil {
				return Result{}, fmt.Errorf("lily shapes: settle: %w", err)
			}
			tr.acked(int64(len(got)))
			done += len(got)
		}
	}
	res := m.stop()
	if err := errors.Join(tr.check(), checkLilyEmpty(ctx, t, c.N)); err != nil {
		return Result{}, fmt.Errorf("lily shapes: %w", err)
	}
	name, how := "Lily schema, other statement shapes (experiment)", "a prepared DELETE per ack"
	if ackJSON {
		name, how = "Lily schema, other statement shapes, JSON batch ack (experiment)", "one JSON-driven fenced DELETE per settle"
	}
	return res.done(name, c.N,
		fmt.Sprintf("as the raw run (%d per publish/lease/settle), statements prepared once on the *sql.DB, fixed-shape lease UPDATE, %s", c.Batch, how)), nil
}
