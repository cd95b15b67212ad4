package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// Statements whose length depends on a count are prepared for a few fixed
// sizes, so that SQLite parses each shape once, when first needed, never
// per call.
const (
	// publishChunk is the most rows in one INSERT statement (8 parameters
	// each: insertSQL); a publish of fewer rows, or its remainder, is
	// split into exact power-of-two chunks below it (100 = 100; 37 = 32 +
	// 4 + 1).
	publishChunk = 100
	// leaseChunk is the most ids in one lease UPDATE; fewer are padded
	// with NULL up to the next power of two (NULL matches no id).
	leaseChunk = 512
)

const (
	// OR IGNORE, for the reason given at leaseSQL: a multi-row INSERT
	// that may abort keeps a statement journal of every page it touches
	// that the transaction had written before — in a group transaction
	// (group.go) the pages of the settlements and leases before it, which
	// past 64 KiB spill to a temporary file. A row could only be ignored
	// on a NOT NULL column given NULL (no UNIQUE index covers the
	// columns; the rowid is assigned), which insertSQL never gives one (a
	// NULL key or type goes through COALESCE); and insertMessages checks
	// that every row was inserted, failing the publish otherwise, so
	// nothing is ever skipped silently.
	insertPrefix = `INSERT OR IGNORE INTO lily_messages(queue, event_id, msg_key, msg_type, body, headers, visible_at, enqueued_at, accounted) VALUES `

	checkQueueSQL = `SELECT 1 FROM lily_queues WHERE name = ?`

	// The LIMIT is an expression, not a bare parameter: SQLite's planner
	// reads a bare LIMIT parameter's value and re-prepares the statement
	// whenever it changes (every receive, with the runtime's prefetch).
	candidatesSQL = `SELECT ` + candidateColumns + ` FROM lily_messages
		WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, id LIMIT CAST(? AS INTEGER)`
	// A keyed message waits while an older one of its key is still here
	// (leased, perhaps by a consumer that died, or delayed).
	candidatesKeyOrderSQL = `SELECT ` + candidateColumns + ` FROM lily_messages m
		WHERE queue = ? AND visible_at <= ? AND (msg_key = '' OR NOT EXISTS (
			SELECT 1 FROM lily_messages o WHERE o.queue = m.queue AND o.msg_key = m.msg_key AND o.msg_key != '' AND o.id < m.id))
		ORDER BY visible_at, id LIMIT CAST(? AS INTEGER)`
	// candidateColumns are what a delivery needs (receive.go: candidate).
	candidateColumns = `id, receive_count, event_id, msg_key, msg_type, body, headers, enqueued_at`
	nextVisibleSQL   = `SELECT MIN(visible_at) FROM lily_messages WHERE queue = ?`

	deleteRowSQL = `DELETE FROM lily_messages WHERE id = ? AND receive_count = ?`
	// The copy is a new row (new ID, receive count 0, enqueued now): a
	// stale receipt of the original can never touch it.
	retryCopySQL = `INSERT INTO lily_messages(queue, event_id, msg_key, msg_type, body, headers, visible_at, enqueued_at, accounted)
		SELECT queue, event_id, msg_key, msg_type, body, ?, ?, ?, 1 FROM lily_messages WHERE id = ? AND receive_count = ?`
	releaseSQL = `UPDATE lily_messages SET visible_at = ?, lease_owner = NULL
		WHERE id = ? AND receive_count = ?`
)

// leaseSQL is the lease UPDATE for n ids (its first two parameters are the
// new visible_at and the lease owner). OR IGNORE changes no result: no
// constraint can fail on the columns it sets (visible_at is bound, never
// NULL; receive_count + 1; lease_owner may be NULL; no UNIQUE index covers
// them), and a row it skipped would fail the lease (leaseTx counts the
// rows leased against the candidates). But a statement
// that cannot abort needs no statement journal: with the default ABORT,
// SQLite copies every page the UPDATE touches into one, which past 64 KiB
// spills to a temporary file — about a quarter of the bytes the transport
// wrote per message.
func leaseSQL(n int) string {
	return `UPDATE OR IGNORE lily_messages
		SET visible_at = ?, receive_count = receive_count + 1, lease_owner = ?
		WHERE id IN (` + qmarks(n) + `)`
}

// insertSQL is the INSERT of n rows, eight parameters each: accounted is
// the literal 1 (foreign.go), and an empty key or type is bound as NULL
// and stored as the empty string (COALESCE), since the driver copies every
// text argument into a C buffer of its own, empty ones too. Binding is
// about a fifth of a publish's CPU; these two lowered the runtime's CPU
// per message by ≈ 4 % (measured in e631824: git show e631824 -- docs/benchmarks.md).
// Parameters shared by the rows (queue, time) cannot be bound once: a
// numbered parameter (?NNN) made the driver look up every parameter's
// name, which cost more than it saved.
func insertSQL(n int) string {
	const tuple = `(?,?,COALESCE(?,''),COALESCE(?,''),?,?,?,?,1)`
	return insertPrefix + strings.TrimSuffix(strings.Repeat(tuple+",", n), ",")
}

// statements are the transport's hot statements, prepared on the *sql.DB.
// With its single connection, Tx.StmtContext reuses such a statement; one
// prepared on a Tx (or a Conn) would be parsed again in every transaction.
//
// The fixed statements are prepared at Open. The sized shapes are
// prepared by the writer when a write first needs them (ensure, before
// its transaction begins: with one connection, preparing inside would
// wait for the transaction itself): parsing all of them — 19 statements,
// the largest with 800 parameters — was most of what opening a store cost,
// and a process that only reads the catalog, or publishes one message at
// a time, needs none or few of them.
type statements struct {
	checkQueue                              *sql.Stmt
	insertFull                              *lazyStmt // publishChunk rows
	insertPart                              shapes    // exact sizes 1, 2, 4, …, 64
	candidates, candidatesKeyOrder, nextVis *sql.Stmt
	lease                                   shapes // padded sizes 1, 2, 4, …, leaseChunk
	deleteRow, retryCopy, release           *sql.Stmt
	ledger                                  *catalogdb.CountsAdder
	all                                     []*sql.Stmt
	lazy                                    []*lazyStmt
	// unprepared counts statements a transaction had to parse itself
	// (bind): a PublishTx before the writer prepared its shape.
	unprepared atomic.Int64
	// wanted is set when a lazy statement is wanted (its own flag set).
	wanted atomic.Bool
	// want tells the writer that a lazy statement is wanted (it kicks it).
	want func()
}

// lazyStmt is a statement prepared on the DB by the writer when first
// needed (statements.ensure).
type lazyStmt struct {
	query  string
	st     atomic.Pointer[sql.Stmt]
	wanted atomic.Bool // a transaction needed it before it was prepared
}

// shapes holds one statement per power-of-two size.
type shapes []*lazyStmt

// newShapes returns the shapes of sizes 1, 2, 4, … up to largest.
func newShapes(largest int, build func(int) string) shapes {
	var sh shapes
	for n := 1; n <= largest; n *= 2 {
		sh = append(sh, &lazyStmt{query: build(n)})
	}
	return sh
}

// prepareStatements prepares the fixed statements on db (schema and
// catalog migrated); the shapes wait for ensure.
func prepareStatements(ctx context.Context, db *sql.DB) (*statements, error) {
	s := &statements{
		insertFull: &lazyStmt{query: insertSQL(publishChunk)},
		insertPart: newShapes(publishChunk-1, insertSQL),
		lease:      newShapes(leaseChunk, leaseSQL),
		want:       func() {},
	}
	s.lazy = append(append([]*lazyStmt{s.insertFull}, s.insertPart...), s.lease...)
	var err error
	one := func(dst **sql.Stmt, query string) {
		if err != nil {
			return
		}
		var st *sql.Stmt
		if st, err = db.PrepareContext(ctx, query); err != nil {
			err = fmt.Errorf("sqlite transport: prepare %.40q…: %w", query, err)
			return
		}
		*dst = st
		s.all = append(s.all, st)
	}
	one(&s.checkQueue, checkQueueSQL)
	one(&s.candidates, candidatesSQL)
	one(&s.candidatesKeyOrder, candidatesKeyOrderSQL)
	one(&s.nextVis, nextVisibleSQL)
	one(&s.deleteRow, deleteRowSQL)
	one(&s.retryCopy, retryCopySQL)
	one(&s.release, releaseSQL)
	if err == nil {
		s.ledger, err = catalogdb.PrepareCountsAdder(ctx, db)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// ensure prepares on db, outside any transaction, the shapes the writes ws
// will use, and those a transaction had to parse itself (bind). Only the
// writer calls it; a shape already prepared costs one atomic load.
func (s *statements) ensure(ctx context.Context, db *sql.DB, ws []*write) error {
	for _, w := range ws {
		switch w.kind {
		case writePublish: // insertMessages: full chunks, then the bits of the rest
			if w.count >= publishChunk {
				if err := s.insertFull.prepare(ctx, db); err != nil {
					return err
				}
			}
			for i, sh := range s.insertPart {
				if (w.count%publishChunk)&(1<<i) == 0 {
					continue
				}
				if err := sh.prepare(ctx, db); err != nil {
					return err
				}
			}
		case writeLease: // leaseUpdate: any padded size up to the limit's
			if w.count < 1 {
				continue
			}
			for _, sh := range s.lease[:bits.Len(uint(min(w.count, leaseChunk)-1))+1] {
				if err := sh.prepare(ctx, db); err != nil {
					return err
				}
			}
		}
	}
	if !s.wanted.Swap(false) {
		return nil
	}
	for _, l := range s.lazy {
		if l.wanted.Load() {
			if err := l.prepare(ctx, db); err != nil {
				s.wanted.Store(true) // still wanted: the next write tries again
				return err
			}
		}
	}
	return nil
}

// prepare prepares l on db unless it is already.
func (l *lazyStmt) prepare(ctx context.Context, db *sql.DB) error {
	if l.st.Load() != nil {
		return nil
	}
	st, err := db.PrepareContext(ctx, l.query)
	if err != nil {
		return fmt.Errorf("prepare %.40q…: %w", l.query, err)
	}
	l.st.Store(st)
	return nil
}

// bind returns l bound to tx: the statement prepared on the DB, or, when
// ensure has not prepared it (a PublishTx runs in its caller's
// transaction, outside the writer), one parsed in tx, and the writer is
// told to prepare it for the next time.
func (s *statements) bind(ctx context.Context, tx *sql.Tx, l *lazyStmt) (*sql.Stmt, error) {
	if st := l.st.Load(); st != nil {
		return tx.StmtContext(ctx, st), nil
	}
	s.unprepared.Add(1)
	l.wanted.Store(true)
	s.wanted.Store(true)
	s.want()
	return tx.PrepareContext(ctx, l.query)
}

// close releases the statements.
func (s *statements) close() error {
	var errs []error
	for _, st := range s.all {
		errs = append(errs, st.Close())
	}
	for _, l := range s.lazy {
		if st := l.st.Load(); st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.ledger != nil {
		errs = append(errs, s.ledger.Close())
	}
	return errors.Join(errs...)
}

// padded returns the statement for n items (1 ≤ n ≤ the largest size)
// and its size: the smallest power of two ≥ n. The caller pads the
// parameters up to that size.
func (sh shapes) padded(n int) (*lazyStmt, int) {
	i := bits.Len(uint(n - 1)) // 1 → 0, 2 → 1, 3..4 → 2, …
	return sh[i], 1 << i
}

// exact returns the statement for the largest power of two ≤ n and that
// size (n ≥ 1).
func (sh shapes) exact(n int) (*lazyStmt, int) {
	i := min(bits.Len(uint(n))-1, len(sh)-1)
	return sh[i], 1 << i
}

// qmarks returns n comma-separated question marks.
func qmarks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}
