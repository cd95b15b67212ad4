// Package appdbtest gives tests of packages inbox and outbox an
// application database of their own on each way Lily supports one: SQLite
// through database/sql, PostgreSQL through database/sql (pgx stdlib) and
// PostgreSQL through pgx. PostgreSQL databases come from internal/pgtest
// (a fresh schema per test; skipped loudly without a server, failed under
// CI=true).
package appdbtest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/sqlitedb"
)

// DB is one application database: SQL is set for database/sql, Pool for
// pgx.
type DB struct {
	Name string
	SQL  *sql.DB
	Pool *pgxpool.Pool
}

// Handle is the *sql.DB or the *pgxpool.Pool.
func (d DB) Handle() any {
	if d.Pool != nil {
		return d.Pool
	}
	return d.SQL
}

// Each runs fn as a parallel subtest on each kind of database.
func Each(t *testing.T, fn func(t *testing.T, d DB)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		db, err := sqlitedb.Open(context.Background(), filepath.Join(t.TempDir(), "app.db"), sqlitedb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		fn(t, DB{Name: "sqlite", SQL: db})
	})
	EachPG(t, fn)
}

// EachPG runs fn as a parallel subtest on PostgreSQL through database/sql
// and through pgx.
func EachPG(t *testing.T, fn func(t *testing.T, d DB)) {
	t.Run("postgres-sql", func(t *testing.T) {
		t.Parallel()
		db, err := sql.Open("pgx", pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		fn(t, DB{Name: "postgres-sql", SQL: db})
	})
	t.Run("postgres-pgx", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		fn(t, DB{Name: "postgres-pgx", Pool: pool})
	})
}
