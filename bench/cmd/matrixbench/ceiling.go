package main

// The bare ceiling: the rows the accounting writes for the messages of a
// cell, written with plain batched SQL and nothing else — no broker, no
// runtime, no look-ups.
//
// What ledger.Account writes per message on each catalog, in the
// matrix's cells (prefilled through the accounted publisher, whose
// messages carry ledger.HeaderCounted):
//
//   - publish (before the clock): one lily_ledger_events row
//     (queue, 'accepted', key, at) per message and the queue's accepted
//     count (PostgreSQL: this writer's lily_ledger_deltas row; SQLite:
//     lily_ledger);
//   - receive: PostgreSQL nothing (the ledger trusts the mark); SQLite a
//     look-up of each key, which finds it and writes nothing;
//   - settle, once per settle batch: each key's row turned to
//     (kind 'acked', at) and the queue's acked count raised by the batch
//     — PostgreSQL: one statement (an upsert of the rows, the writer's
//     delta row); SQLite: one transaction (an UPDATE per key, one upsert
//     of lily_ledger).
//
// So the ceiling prefills the same accepted rows and counts (off the
// clock), and its writer processes turn them acked, batch after batch,
// each batch in one round trip: PostgreSQL a pgx batch of one multi-row
// UPDATE and the writer's delta upsert (one implicit transaction);
// SQLite one transaction of one multi-row UPDATE and the lily_ledger
// upsert. The keys are the ledger's (ledger.Key of a UUID-shaped event ID
// and a body of the cells' size), so the rows and index entries are the
// same size.

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/ledger"
)

// ceilingKey is the ledger key of the ceiling's message i.
func ceilingKey(i, bodySize int) string {
	return ledger.Key(fmt.Sprintf("00000000-0000-7000-8000-%012d", i), body(i, bodySize))
}

// body is message i's body: its number, padded to size bytes.
func body(i, size int) []byte {
	b := []byte(strconv.Itoa(i))
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

// prefillCeiling writes what the accounted publisher writes for n
// messages: their accepted rows, 1,000 per statement, and the queue's
// accepted count.
func prefillCeiling(ctx context.Context, cat *catalog.Store, s spec) error {
	db := cat.DB()
	at := time.Now().UnixMilli()
	const chunk = 1000
	for start := 0; start < s.N; start += chunk {
		var q strings.Builder
		q.WriteString(`INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES `)
		var args []any
		for i := start; i < min(start+chunk, s.N); i++ {
			if i > start {
				q.WriteString(", ")
			}
			if cat.Kind() == "postgres" {
				k := len(args)
				fmt.Fprintf(&q, "($%d, 'accepted', $%d, $%d)", k+1, k+2, k+3)
			} else {
				q.WriteString("(?, 'accepted', ?, ?)")
			}
			args = append(args, s.Queue, ceilingKey(i, s.BodySize), at)
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("prefill the ceiling's ledger rows: %w", err)
		}
	}
	return ledger.New(cat).AddCounts(ctx, s.Queue, int64(s.N), 0)
}

// writeCeiling is one writer process of a ceiling cell: it turns its
// share of the keys acked, s.Batch per round trip, reports its progress,
// and waits for SIGTERM (so that the parent reads its CPU before it
// exits).
func writeCeiling(ctx context.Context, s spec) error {
	var keys []string
	for i := s.Index; i < s.N; i += s.Procs {
		keys = append(keys, ceilingKey(i, s.BodySize))
	}
	write, closeFn, err := ceilingWriter(ctx, s)
	if err != nil {
		return err
	}
	defer closeFn()
	p := startProgress()
	for start := 0; start < len(keys); start += s.Batch {
		batch := keys[start:min(start+s.Batch, len(keys))]
		if err := write(ctx, batch, time.Now().UnixMilli()); err != nil {
			p.stop()
			return err
		}
		p.acked.Add(int64(len(batch)))
	}
	<-ctx.Done()
	p.stop()
	return nil
}

// ceilingWriter opens the cell's catalog for plain SQL and returns the
// function that writes one batch.
func ceilingWriter(ctx context.Context, s spec) (func(context.Context, []string, int64) error, func(), error) {
	if s.Catalog == catPostgres {
		conn, err := pgx.Connect(ctx, s.CatalogURL)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", s.CatalogURL, err)
		}
		return func(ctx context.Context, keys []string, at int64) error {
			b := &pgx.Batch{}
			b.Queue(`UPDATE lily_ledger_events SET kind = 'acked', at = $1 WHERE queue = $2 AND event_id = ANY($3) AND kind = 'accepted'`, at, s.Queue, keys)
			b.Queue(`INSERT INTO lily_ledger_deltas(queue, writer, accepted, acked) VALUES ($1, pg_backend_pid(), 0, $2)
				ON CONFLICT (queue, writer) DO UPDATE SET acked = lily_ledger_deltas.acked + excluded.acked`, s.Queue, len(keys))
			br := conn.SendBatch(ctx, b)
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() != int64(len(keys)) {
				err = fmt.Errorf("turned %d rows acked, want %d", tag.RowsAffected(), len(keys))
			}
			if err == nil {
				_, err = br.Exec()
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return err
		}, func() { conn.Close(context.Background()) }, nil
	}
	db, err := sqlitedb.Open(ctx, s.CatalogURL, sqlitedb.Options{})
	if err != nil {
		return nil, nil, err
	}
	stmts := map[int]*sql.Stmt{}
	return func(ctx context.Context, keys []string, at int64) error {
		st, ok := stmts[len(keys)]
		if !ok {
			if st, err = db.PrepareContext(ctx, `UPDATE lily_ledger_events SET kind = 'acked', at = ? WHERE queue = ? AND kind = 'accepted' AND event_id IN (`+catalogdb.Placeholders(len(keys))+`)`); err != nil {
				return err
			}
			stmts[len(keys)] = st
		}
		args := []any{at, s.Queue}
		for _, k := range keys {
			args = append(args, k)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != int64(len(keys)) {
			return fmt.Errorf("turned %d rows acked, want %d", n, len(keys))
		}
		if err := catalogdb.AddCountsTx(ctx, tx, s.Queue, 0, int64(len(keys))); err != nil {
			return err
		}
		return tx.Commit()
	}, func() { db.Close() }, nil
}

// checkCeiling verifies a ceiling cell: every row acked, and the ledger
// (read by package ledger, deltas folded) at accepted = acked = n.
func checkCeiling(ctx context.Context, cat *catalog.Store, s spec) error {
	var acked int
	q := `SELECT COUNT(*) FROM lily_ledger_events WHERE queue = ? AND kind = 'acked'`
	if cat.Kind() == "postgres" {
		q = strings.Replace(q, "?", "$1", 1)
	}
	if err := cat.DB().QueryRowContext(ctx, q, s.Queue).Scan(&acked); err != nil {
		return err
	}
	r, err := ledgerRow(ctx, cat, nil, s.Queue)
	if err != nil {
		return err
	}
	if acked != s.N || r.Accepted != int64(s.N) || r.Acked != int64(s.N) || !r.Balanced() {
		return fmt.Errorf("%d rows acked, ledger %+v; want %d, accepted = acked = %d, balanced", acked, r, s.N, s.N)
	}
	return nil
}
