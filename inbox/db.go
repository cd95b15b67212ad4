package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx is the transaction the inbox and the version guard write in: the
// handler's own, so that their marks commit or roll back with its effect.
// It is one of
//
//   - a database/sql transaction (*sql.Tx) on SQLite (modernc.org/sqlite)
//     or PostgreSQL (github.com/jackc/pgx/v5/stdlib), or anything else with
//     ExecContext and QueryRowContext (*sql.DB, *sql.Conn);
//   - a pgx transaction (pgx.Tx), or anything else with pgx's Exec and
//     QueryRow (*pgx.Conn, *pgxpool.Pool, pgxpool.Tx).
//
// Any other type is refused with an error naming it. Migrate and Prune
// take the same kinds of handle (a *sql.DB or a pool, typically).
type Tx = any

// sqlHandle is database/sql's *sql.Tx, *sql.DB and *sql.Conn.
type sqlHandle interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// pgxHandle is pgx's Tx, Conn and Pool.
type pgxHandle interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// handle runs statements on either kind. The statements use $n
// placeholders, which both PostgreSQL and SQLite accept.
type handle struct {
	s sqlHandle
	p pgxHandle
}

// errNilTx is returned for a nil transaction.
var errNilTx = errors.New("nil transaction: pass the handler's *sql.Tx or pgx.Tx")

func open(tx Tx) (handle, error) {
	switch t := tx.(type) {
	case nil:
		return handle{}, errNilTx
	case sqlHandle:
		return handle{s: t}, nil
	case pgxHandle:
		return handle{p: t}, nil
	}
	return handle{}, fmt.Errorf("transaction of type %T: want a *sql.Tx (SQLite or PostgreSQL through database/sql) or a pgx.Tx", tx)
}

// exec runs q and returns the number of rows it changed.
func (h handle) exec(ctx context.Context, q string, args ...any) (int64, error) {
	if h.p != nil {
		tag, err := h.p.Exec(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	}
	res, err := h.s.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs q and scans its one row into dest; sql.ErrNoRows (or
// pgx.ErrNoRows) becomes found = false.
func (h handle) queryRow(ctx context.Context, q string, args []any, dest ...any) (found bool, err error) {
	if h.p != nil {
		err = h.p.QueryRow(ctx, q, args...).Scan(dest...)
	} else {
		err = h.s.QueryRowContext(ctx, q, args...).Scan(dest...)
	}
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
