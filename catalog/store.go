package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/internal/sqlitedb"
)

// Store is the SQLite catalog.
type Store struct {
	db     *sql.DB
	owned  bool
	ledger ledgerSettings // ledger_prune.go
}

// Open opens the catalog in the SQLite file at path, creating its tables.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
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

// New uses an open database handle (e.g. the SQLite transport's), creating
// the catalog tables if needed. Close does not close db.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// DB returns the underlying database handle.
func (s *Store) DB() *sql.DB { return s.db }

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
func (s *Store) Insert(ctx context.Context, entries ...*Entry) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("catalog: begin: %w", err)
	}
	defer tx.Rollback()
	in, err := NewInserter(ctx, tx)
	if err != nil {
		return err
	}
	defer in.Close()
	for _, e := range entries {
		if e.DLKey != "" {
			dup, err := markDuplicate(ctx, tx, e)
			if err != nil {
				return err
			}
			if dup {
				e.ID = 0
				continue
			}
		}
		if err := in.Insert(ctx, e); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// markDuplicate reports whether e repeats a dead-lettering already held in
// the catalog, as an at-least-once hand-off can deliver it twice (the DLQ
// copy was confirmed, the original's ack was lost, the message was
// dead-lettered again); if so it counts the duplicate on the held entry
// instead of adding one.
//
// The same dead-lettering means the same message failing at the same
// place: same queue, event ID, redrive generation, body bytes (SHA-256),
// source and source coordinates (partition/offset on a log), still in the
// work list. An event ID alone is never enough — foreign producers reuse
// message IDs, or set none — so two dead letters that differ in any of
// these are both kept. This is the identity the ledger counts by too
// (ledgerKey: event ID and body), so merging never unbalances it.
func markDuplicate(ctx context.Context, tx *sql.Tx, e *Entry) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE lily_dlq_entries SET duplicates = duplicates + 1
		WHERE id = (SELECT id FROM lily_dlq_entries WHERE queue = ? AND event_id = ? AND redrive_count = ?
			AND body_sha256 = ? AND source = ? AND source_coords = ?
			AND state IN ('pending', 'parked', 'needs_manual') AND (dl_key IS NULL OR dl_key <> ?) LIMIT 1)`,
		e.Queue, e.EventID, e.RedriveCount, e.BodySHA256, e.Source, e.SourceCoords, e.DLKey)
	if err != nil {
		return false, fmt.Errorf("catalog: check duplicate of %s: %w", e.EventID, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// Get returns the entry with the given ID, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (*Entry, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+selectCols+` FROM lily_dlq_entries WHERE id = ?`, id)
	e, err := scanEntry(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	return e, err
}

// Each streams the entries matching f in ID order to fn, without loading
// them all; fn's error stops the iteration and is returned.
func (s *Store) Each(ctx context.Context, f Filter, fn func(*Entry) error) error {
	where, args := f.where()
	rows, err := s.db.QueryContext(ctx, `SELECT `+selectCols+` FROM lily_dlq_entries`+where+` ORDER BY id`, args...)
	if err != nil {
		return fmt.Errorf("catalog: query entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEntry(rows)
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
