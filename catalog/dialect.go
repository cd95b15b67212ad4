package catalog

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// dialect is the SQL dialect of a catalog store. The catalog's statements
// are written once, in the subset SQLite and PostgreSQL share, with `?`
// placeholders; the few places where the two differ ask the dialect.
type dialect int

const (
	dialectSQLite dialect = iota
	dialectPostgres
)

// String names the store kind ("sqlite", "postgres").
func (d dialect) String() string {
	if d == dialectPostgres {
		return "postgres"
	}
	return "sqlite"
}

// pgLockPrefix starts the names of the catalog's advisory locks on
// PostgreSQL: "lily:write" (every catalog transaction, see
// handle.BeginTx) and "lily:migrate" (migrations), each followed by the
// schema the catalog lives in, so that catalogs in other schemas of one
// database never wait for each other.
const pgLockPrefix = "lily:"

// rebindCache keeps the PostgreSQL form of each statement: the catalog
// builds few distinct statements, and a cached rebind costs a map lookup.
var rebindCache sync.Map // string -> string

// rebind returns q with its `?` placeholders in the dialect's form: as
// written on SQLite, numbered $1..$n on PostgreSQL with SQLite's rules:
// `?N` is parameter N and a plain `?` the one after the highest number
// so far. A `?` inside a quoted string literal or identifier is left
// alone.
func (d dialect) rebind(q string) string {
	if d == dialectSQLite || !strings.Contains(q, "?") {
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

// jsonArrayHas is the condition "the JSON array of strings in column col
// holds the value of the next placeholder".
func (d dialect) jsonArrayHas(col string) string {
	if d == dialectPostgres {
		return "(" + col + ")::jsonb @> jsonb_build_array(CAST(? AS text))"
	}
	return "EXISTS (SELECT 1 FROM json_each(" + col + ") WHERE value = ?)"
}

// handle is a catalog store's database handle: a *sql.DB whose statements
// are rebound to its dialect. On PostgreSQL every transaction first takes
// one advisory lock, so that catalog transactions run one at a time as
// they do on SQLite (immediate transactions): the catalog's
// read-then-write decisions (held keys, redrive claims, duplicates) need
// no other guard on either store. Plain statements outside a transaction
// are single statements and take no lock.
type handle struct {
	*sql.DB
	d dialect
}

// ExecContext runs q rebound.
func (h *handle) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return h.DB.ExecContext(ctx, h.d.rebind(q), args...)
}

// QueryContext runs q rebound.
func (h *handle) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return h.DB.QueryContext(ctx, h.d.rebind(q), args...)
}

// QueryRowContext runs q rebound.
func (h *handle) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return h.DB.QueryRowContext(ctx, h.d.rebind(q), args...)
}

// PrepareContext prepares q rebound.
func (h *handle) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return h.DB.PrepareContext(ctx, h.d.rebind(q))
}

// BeginTx begins a transaction; on PostgreSQL it takes the catalog's
// transaction lock first.
func (h *handle) BeginTx(ctx context.Context, o *sql.TxOptions) (*txHandle, error) {
	tx, err := h.DB.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	if h.d == dialectPostgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || current_schema()))`, pgLockPrefix+"write"); err != nil {
			tx.Rollback()
			return nil, err
		}
	}
	return &txHandle{Tx: tx, d: h.d}, nil
}

// txHandle is a transaction whose statements are rebound to its dialect.
type txHandle struct {
	*sql.Tx
	d dialect
}

// wrapTx adopts a SQLite transaction of a caller (the embedded transport
// dead-letters in its own transaction).
func wrapTx(tx *sql.Tx) *txHandle { return &txHandle{Tx: tx, d: dialectSQLite} }

// ExecContext runs q rebound.
func (t *txHandle) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, t.d.rebind(q), args...)
}

// QueryContext runs q rebound.
func (t *txHandle) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.Tx.QueryContext(ctx, t.d.rebind(q), args...)
}

// QueryRowContext runs q rebound.
func (t *txHandle) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, t.d.rebind(q), args...)
}

// PrepareContext prepares q rebound.
func (t *txHandle) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return t.Tx.PrepareContext(ctx, t.d.rebind(q))
}

// querier is what a read needs: a handle or a transaction.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

var (
	_ querier = (*handle)(nil)
	_ querier = (*txHandle)(nil)
)

// boolInt stores a Go bool in an INTEGER column (0 or 1): PostgreSQL does
// not take a bool for a BIGINT.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (h *handle) dialect() dialect   { return h.d }
func (t *txHandle) dialect() dialect { return t.d }
