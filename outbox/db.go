package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx is the transaction Add writes in, the business transaction: a
// *sql.Tx (SQLite through modernc.org/sqlite, or PostgreSQL through
// github.com/jackc/pgx/v5/stdlib) or a pgx.Tx — or anything else with
// ExecContext (database/sql) or pgx's Exec.
type Tx = any

// DB is what Migrate and the relay open transactions on: a *sql.DB
// (SQLite or PostgreSQL) or a pgx pool or connection (*pgxpool.Pool,
// *pgx.Conn: anything with pgx's Begin, Exec and Query).
type DB = any

type sqlExec interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

type pgxExec interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type pgxDB interface {
	pgxExec
	Begin(ctx context.Context) (pgx.Tx, error)
}

// dialect is the SQL spoken by the database.
type dialect int

const (
	dialectSQLite dialect = iota
	dialectPostgres
)

// exec runs q on a *sql.Tx/*sql.DB or a pgx handle.
func exec(ctx context.Context, h any, q string, args ...any) (int64, error) {
	switch t := h.(type) {
	case nil:
		return 0, errors.New("nil transaction: pass the business transaction (*sql.Tx or pgx.Tx)")
	case sqlExec:
		res, err := t.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	case pgxExec:
		tag, err := t.Exec(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	}
	return 0, fmt.Errorf("transaction of type %T: want a *sql.Tx (SQLite or PostgreSQL through database/sql) or a pgx.Tx", h)
}

// dialectOf tells SQLite from PostgreSQL for a DB.
func dialectOf(db DB) (dialect, error) {
	switch t := db.(type) {
	case *sql.DB:
		if strings.Contains(strings.ToLower(fmt.Sprintf("%T", t.Driver())), "sqlite") {
			return dialectSQLite, nil
		}
		return dialectPostgres, nil
	case pgxDB:
		return dialectPostgres, nil
	case nil:
		return 0, errors.New("nil database: pass a *sql.DB or a pgx pool")
	}
	return 0, fmt.Errorf("database of type %T: want a *sql.DB (SQLite or PostgreSQL) or a *pgxpool.Pool / *pgx.Conn", db)
}

// placeholders returns "$from, $from+1, ..." n of them.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d", from+i)
	}
	return b.String()
}
