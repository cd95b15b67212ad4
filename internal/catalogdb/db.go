package catalogdb

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// Dialect is the SQL dialect of a catalog store. The catalog's statements
// are written once, in the subset SQLite and PostgreSQL share, with `?`
// placeholders; the few places where the two differ ask the dialect.
type Dialect int

// The dialects.
const (
	SQLite Dialect = iota
	Postgres
)

// String names the store kind ("sqlite", "postgres").
func (d Dialect) String() string {
	if d == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// pgLockPrefix starts the names of the catalog's advisory locks on
// PostgreSQL: "lily:migrate" (migrations) and "lily:key:" (the keys of a
// keyed transaction, see DB.BeginKeyed), each followed by the schema the
// catalog lives in, so that catalogs in other schemas of one database
// never wait for each other.
const pgLockPrefix = "lily:"

// rebindCache keeps the PostgreSQL form of each statement: the catalog
// builds few distinct statements, and a cached rebind costs a map lookup.
var rebindCache sync.Map // string -> string

// Rebind returns q with its `?` placeholders in the dialect's form: as
// written on SQLite, numbered $1..$n on PostgreSQL with SQLite's rules:
// `?N` is parameter N and a plain `?` the one after the highest number
// so far. A `?` inside a quoted string literal or identifier is left
// alone.
func (d Dialect) Rebind(q string) string {
	if d == SQLite || !strings.Contains(q, "?") {
		return q
	}
	if v, ok := rebindCache.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0 // the highest parameter number so far, as SQLite counts
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			if j > i+1 { // ?N is parameter N
				k, _ := strconv.Atoi(q[i+1 : j])
				n = max(n, k)
				b.WriteByte('$')
				b.WriteString(q[i+1 : j])
				i = j - 1
				continue
			}
			n++ // a plain ? is the one after the highest so far
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	out := b.String()
	rebindCache.Store(q, out)
	return out
}

// ForUpdate ends a SELECT of rows a decision is about to change: on
// PostgreSQL it locks them (FOR UPDATE), so that a concurrent decision on
// one of them waits for the commit and the rows are read again as
// committed; SQLite has one writer and needs nothing.
func (d Dialect) ForUpdate() string {
	if d == Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// JSONArrayHas is the condition "the JSON array of strings in column col
// holds the value of the next placeholder".
func (d Dialect) JSONArrayHas(col string) string {
	if d == Postgres {
		return "(" + col + ")::jsonb @> jsonb_build_array(CAST(? AS text))"
	}
	return "EXISTS (SELECT 1 FROM json_each(" + col + ") WHERE value = ?)"
}

// DB is a catalog store's database handle: a *sql.DB whose statements
// are rebound to its dialect. On SQLite one transaction writes at a time
// (immediate transactions), so the catalog's read-then-write decisions
// need no other guard. On PostgreSQL, under read committed, no decision
// runs alone: each locks the data it decides — the rows it changes
// (SELECT … FOR UPDATE, conditional UPDATEs, SKIP LOCKED claims) or, for
// data without a row yet, an advisory lock per key (BeginKeyed) — and
// docs/catalog.md says, decision by decision, why it stays exact.
//
// A DB holds nothing but the *sql.DB and the dialect: two DBs made for one
// *sql.DB are the same handle.
type DB struct {
	*sql.DB
	d Dialect
}

// New returns the handle of db, whose statements are in dialect d.
func New(db *sql.DB, d Dialect) *DB { return &DB{DB: db, d: d} }

// Source is what a catalog store shows of its database: *catalog.Store
// implements it (DB and Kind are part of its API).
type Source interface {
	// DB returns the store's database handle.
	DB() *sql.DB
	// Kind names the store's dialect: "sqlite" or "postgres".
	Kind() string
}

// Of returns the handle of a catalog store, for the packages layered on
// it (ledger, redrive, rules), which run their statements on the store's
// database.
func Of(s Source) *DB {
	d := SQLite
	if s.Kind() == Postgres.String() {
		d = Postgres
	}
	return New(s.DB(), d)
}

// Dialect returns the handle's dialect.
func (h *DB) Dialect() Dialect { return h.d }

// ExecContext runs q rebound.
func (h *DB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return h.DB.ExecContext(ctx, h.d.Rebind(q), args...)
}

// QueryContext runs q rebound.
func (h *DB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return h.DB.QueryContext(ctx, h.d.Rebind(q), args...)
}

// QueryRowContext runs q rebound.
func (h *DB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return h.DB.QueryRowContext(ctx, h.d.Rebind(q), args...)
}

// PrepareContext prepares q rebound.
func (h *DB) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return h.DB.PrepareContext(ctx, h.d.Rebind(q))
}

// BeginTx begins a transaction. It takes no lock: on SQLite the
// transaction is the one writer; on PostgreSQL the decision it runs locks
// the rows it needs.
func (h *DB) BeginTx(ctx context.Context, o *sql.TxOptions) (*Tx, error) {
	tx, err := h.DB.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return &Tx{Tx: tx, d: h.d}, nil
}

// BeginKeyed begins a transaction for a decision whose data is named by
// keys (e.g. the identity of a dead-lettering whose duplicate it checks,
// which has no row to lock before it is inserted): on PostgreSQL it takes
// a transaction-level advisory lock per key, all in one statement in one
// order (sorted), so keyed transactions wait only for those that share a
// key, and never in a cycle. On SQLite it is BeginTx.
func (h *DB) BeginKeyed(ctx context.Context, keys []string) (*Tx, error) {
	tx, err := h.BeginTx(ctx, nil)
	if err != nil || h.d != Postgres || len(keys) == 0 {
		return tx, err
	}
	// OFFSET 0 keeps the sorted subquery apart, so the locks are taken in
	// its order.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(h) FROM
		(SELECT DISTINCT hashtextextended(?1 || current_schema() || k, 0) AS h FROM unnest(CAST(?2 AS text[])) AS k ORDER BY h OFFSET 0) s`,
		pgLockPrefix+"key:", keys); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// WithTx runs fn in a transaction of its own, committed when fn returns
// nil and rolled back otherwise.
func (h *DB) WithTx(ctx context.Context, fn func(*Tx) error) error {
	return runTx(func() (*Tx, error) { return h.BeginTx(ctx, nil) }, fn)
}

// WithKeyed runs fn in a keyed transaction of its own (BeginKeyed),
// committed when fn returns nil and rolled back otherwise. With no keys
// it is the transaction of a decision kept exact by the rows it locks and
// the conditions of its statements.
func (h *DB) WithKeyed(ctx context.Context, keys []string, fn func(*Tx) error) error {
	return runTx(func() (*Tx, error) { return h.BeginKeyed(ctx, keys) }, fn)
}

func runTx(begin func() (*Tx, error), fn func(*Tx) error) error {
	tx, err := begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Tx is a transaction whose statements are rebound to its dialect.
type Tx struct {
	*sql.Tx
	d Dialect
}

// SQLiteTx adopts a SQLite transaction of a caller (the embedded transport
// dead-letters in its own transaction).
func SQLiteTx(tx *sql.Tx) *Tx { return &Tx{Tx: tx, d: SQLite} }

// Dialect returns the transaction's dialect.
func (t *Tx) Dialect() Dialect { return t.d }

// ExecContext runs q rebound.
func (t *Tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, t.d.Rebind(q), args...)
}

// QueryContext runs q rebound.
func (t *Tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.Tx.QueryContext(ctx, t.d.Rebind(q), args...)
}

// QueryRowContext runs q rebound.
func (t *Tx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, t.d.Rebind(q), args...)
}

// PrepareContext prepares q rebound.
func (t *Tx) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return t.Tx.PrepareContext(ctx, t.d.Rebind(q))
}

// Querier is a handle or a transaction: what a statement needs. Inside a
// transaction every statement must go through the Tx: a SQLite catalog has
// one connection.
type Querier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	Dialect() Dialect
}

var (
	_ Querier = (*DB)(nil)
	_ Querier = (*Tx)(nil)
)

// BoolInt stores a Go bool in an INTEGER column (0 or 1): PostgreSQL does
// not take a bool for a BIGINT.
func BoolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Placeholders returns n comma-separated question marks.
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// HeldCond is the condition of the partial indexes over held entries
// (pending, parked, needs_manual); a query uses them only when its WHERE
// clause contains this exact term.
const HeldCond = "state IN ('pending', 'parked', 'needs_manual')"
