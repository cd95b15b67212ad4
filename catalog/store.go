package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/sqlitedb"
)

// Store is the catalog: a SQLite file (the embedded default, shared with
// the SQLite transport) or a PostgreSQL database (for fleets: consumers on
// many hosts and several 'lily serve' replicas on one catalog). Every
// operation works the same on both.
type Store struct {
	db    *catalogdb.DB
	owned bool
	// tracer traces the writes when set (WithTracerProvider); nil: no
	// spans, and nothing read for them.
	tracer trace.Tracer
}

// Open opens the catalog at where: a PostgreSQL URL ("postgres://…", see
// OpenPostgres) or the path of a SQLite file, created with its tables if
// needed.
func Open(ctx context.Context, where string) (*Store, error) {
	if IsPostgresURL(where) {
		return OpenPostgres(ctx, where)
	}
	db, err := sqlitedb.Open(ctx, where, sqlitedb.Options{})
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New uses an open SQLite database handle (e.g. the SQLite transport's),
// creating the catalog tables if needed. Close does not close db.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	if err := catalogdb.MigrateOnce(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: catalogdb.New(db, catalogdb.SQLite)}, nil
}

// DB returns the underlying database handle. Statements on it are the
// store's dialect: see Kind.
func (s *Store) DB() *sql.DB { return s.db.DB }

// Kind names the store: "sqlite" or "postgres".
func (s *Store) Kind() string { return s.db.Dialect().String() }

// OldestHeld returns when queue's oldest held entry (pending, parked or
// needs_manual) was dead-lettered; the zero time when it holds none. It
// reads the first row of each held state in the (queue, state,
// dead_lettered_at) index.
func (s *Store) OldestHeld(ctx context.Context, queue string) (time.Time, error) {
	var minAt sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT MIN(dead_lettered_at) FROM lily_dlq_entries
		WHERE queue = ? AND state IN ('pending', 'parked', 'needs_manual')`, queue).Scan(&minAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("catalog: oldest held entry of %s: %w", queue, err)
	}
	if !minAt.Valid {
		return time.Time{}, nil
	}
	return time.UnixMilli(minAt.Int64).UTC(), nil
}

// Close closes the database if Open opened it.
func (s *Store) Close() error {
	if s.owned {
		return s.db.Close()
	}
	return nil
}

// Insert adds entries in one transaction (e.g. ingested from a broker DLQ).
// An entry with a DLKey that was inserted before is skipped (ingest is
// idempotent), and one that repeats a held dead-lettering of the same
// message is counted as a duplicate of it (its ID is left 0).
//
// On PostgreSQL two Inserts wait for each other only when they share a
// dead-lettering's identity (catalogdb.DupIdentity); a unique index
// decides between two copies of one DLKey (docs/catalog.md).
func (s *Store) Insert(ctx context.Context, entries ...*Entry) error {
	tx, err := s.db.BeginKeyed(ctx, dupKeys(entries))
	if err != nil {
		return fmt.Errorf("catalog: begin: %w", err)
	}
	defer tx.Rollback()
	if err := catalogdb.InsertEntries(ctx, tx, entries); err != nil {
		return err
	}
	return tx.Commit()
}

// Get returns the entry with the given ID, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (*Entry, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+catalogdb.SelectCols+` FROM lily_dlq_entries WHERE id = ?`, id)
	e, err := catalogdb.ScanEntry(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	return e, err
}

// Each streams the entries matching f in ID order to fn, without loading
// them all; fn's error stops the iteration and is returned.
func (s *Store) Each(ctx context.Context, f Filter, fn func(*Entry) error) error {
	where, args := f.where()
	rows, err := s.db.QueryContext(ctx, `SELECT `+catalogdb.SelectCols+` FROM lily_dlq_entries`+where+` ORDER BY id`, args...)
	if err != nil {
		return fmt.Errorf("catalog: query entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := catalogdb.ScanEntry(rows)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// CountBy counts the entries matching f grouped by column, one of "reason",
// "error_type", "fingerprint", "consumer_version", "source", "state".
func (s *Store) CountBy(ctx context.Context, column string, f Filter) (map[string]int64, error) {
	switch column {
	case "reason", "error_type", "fingerprint", "consumer_version", "source", "state":
	default:
		return nil, fmt.Errorf("catalog: cannot group by %q: use reason, error_type, fingerprint, consumer_version, source or state", column)
	}
	where, args := f.where()
	rows, err := s.db.QueryContext(ctx, `SELECT `+column+`, COUNT(*) FROM lily_dlq_entries`+where+` GROUP BY `+column, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: group by %s: %w", column, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// dupKeys are the keys of a transaction that inserts entries: their
// dead-lettering identities, whose duplicate checks it makes.
func dupKeys(entries []*Entry) []string {
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = catalogdb.DupIdentity(e)
	}
	return keys
}
