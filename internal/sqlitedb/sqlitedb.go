// Package sqlitedb opens Lily's embedded SQLite database (pure Go,
// modernc.org/sqlite) with the settings every part of Lily relies on:
// WAL journal, synchronous FULL (an acknowledged commit survives power loss
// and kill -9), immediate write transactions and a busy timeout so that
// several processes can share one file.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Options tune Open.
type Options struct {
	// Synchronous is the SQLite synchronous level. Defaults to "FULL".
	Synchronous string
	// BusyTimeoutMillis is how long a statement waits for another
	// connection's write lock. Defaults to 10000.
	BusyTimeoutMillis int
	// MaxOpenConns limits the pool. Defaults to 1: SQLite has one writer,
	// and one connection per process avoids lock contention within it.
	MaxOpenConns int
}

// Open opens (creating if needed) the database file at path.
func Open(ctx context.Context, path string, o Options) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path (pass --db PATH)")
	}
	if o.Synchronous == "" {
		o.Synchronous = "FULL"
	}
	switch strings.ToUpper(o.Synchronous) {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return nil, fmt.Errorf("sqlite: synchronous %q: must be OFF, NORMAL, FULL or EXTRA", o.Synchronous)
	}
	if o.BusyTimeoutMillis == 0 {
		o.BusyTimeoutMillis = 10000
	}
	if o.MaxOpenConns == 0 {
		o.MaxOpenConns = 1
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+strings.ToUpper(o.Synchronous)+")")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeoutMillis))
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(o.MaxOpenConns)
	db.SetMaxIdleConns(o.MaxOpenConns)
	db.SetConnMaxLifetime(0)
	if err := connect(ctx, db, time.Duration(o.BusyTimeoutMillis)*time.Millisecond); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// connect makes db's first connection, trying again for up to busy while
// it fails with SQLITE_BUSY. The first connection to a new database file
// switches it to WAL (journal_mode), and SQLite does not call the busy
// handler for that switch: a process that opens a new file at the moment
// another one switches it (several 'lily consume' started together on a
// new catalog) is refused with "database is locked" at once, whatever the
// busy timeout.
func connect(ctx context.Context, db *sql.DB, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	for {
		err := db.PingContext(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isBusy reports an SQLITE_BUSY error (any of its extended codes).
func isBusy(err error) bool {
	var se interface{ Code() int }
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
