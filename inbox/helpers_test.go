package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/appdbtest"
)

// backend is one way to reach the application's database: SQLite through
// database/sql, PostgreSQL through database/sql (pgx stdlib) or pgx.
type backend struct {
	name string
	db   any // *sql.DB or *pgxpool.Pool: for Migrate, Prune, Version
	sql  *sql.DB
	pool *pgxpool.Pool
}

// begin opens a transaction and returns it with its commit and rollback.
func (b backend) begin(t *testing.T, ctx context.Context) (tx any, commit func() error, rollback func()) {
	t.Helper()
	if b.pool != nil {
		ptx, err := b.pool.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptx, func() error { return ptx.Commit(ctx) }, func() { _ = ptx.Rollback(ctx) }
	}
	stx, err := b.sql.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return stx, stx.Commit, func() { _ = stx.Rollback() }
}

// beginE is begin for a handler goroutine: errors instead of t.Fatal.
func (b backend) beginE(ctx context.Context) (tx any, commit func() error, rollback func(), err error) {
	if b.pool != nil {
		ptx, err := b.pool.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			return nil, nil, nil, err
		}
		return ptx, func() error { return ptx.Commit(ctx) }, func() { _ = ptx.Rollback(ctx) }, nil
	}
	stx, err := b.sql.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	return stx, stx.Commit, func() { _ = stx.Rollback() }, nil
}

// exec runs q in tx (a *sql.Tx or pgx.Tx).
func exec(ctx context.Context, tx any, q string, args ...any) error {
	switch t := tx.(type) {
	case *sql.Tx:
		_, err := t.ExecContext(ctx, q, args...)
		return err
	case pgx.Tx:
		_, err := t.Exec(ctx, q, args...)
		return err
	}
	panic("unknown tx")
}

// queryInt returns one integer from q in tx (a *sql.Tx or pgx.Tx).
func queryInt(t *testing.T, ctx context.Context, tx any, q string, args ...any) int64 {
	t.Helper()
	var n int64
	var err error
	switch tx := tx.(type) {
	case *sql.Tx:
		err = tx.QueryRowContext(ctx, q, args...).Scan(&n)
	case pgx.Tx:
		err = tx.QueryRow(ctx, q, args...).Scan(&n)
	default:
		panic("unknown tx")
	}
	if err != nil {
		t.Errorf("%s: %v", q, err)
	}
	return n
}

// count returns one integer from q.
func (b backend) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n int64
	var err error
	if b.pool != nil {
		err = b.pool.QueryRow(context.Background(), q, args...).Scan(&n)
	} else {
		err = b.sql.QueryRow(q, args...).Scan(&n)
	}
	if err != nil {
		t.Fatalf("%s: %s: %v", b.name, q, err)
	}
	return n
}

// eachDB runs fn on every backend, with the inbox tables and an effects
// table (one row per applied effect: not idempotent by itself) created.
func eachDB(t *testing.T, fn func(t *testing.T, b backend)) {
	appdbtest.Each(t, func(t *testing.T, d appdbtest.DB) { fn(t, prepare(t, fromDB(d))) })
}

// eachPG runs fn on the PostgreSQL backends only (database/sql and pgx).
func eachPG(t *testing.T, fn func(t *testing.T, b backend)) {
	appdbtest.EachPG(t, func(t *testing.T, d appdbtest.DB) { fn(t, prepare(t, fromDB(d))) })
}

func fromDB(d appdbtest.DB) backend {
	return backend{name: d.Name, db: d.Handle(), sql: d.SQL, pool: d.Pool}
}

func prepare(t *testing.T, b backend) backend {
	t.Helper()
	ctx := context.Background()
	if err := inbox.Migrate(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, b.db); err != nil { // idempotent
		t.Fatalf("second Migrate: %v", err)
	}
	tx, commit, _ := b.begin(t, ctx)
	if err := exec(ctx, tx, `CREATE TABLE effects (event_id TEXT NOT NULL, entity TEXT NOT NULL DEFAULT '', amount BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	return b
}
