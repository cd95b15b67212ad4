// Package sqlite is Lily's embedded default transport: queues, retry delays
// and the dead-letter catalog in one SQLite file (pure Go, WAL, synchronous
// FULL), durable against kill -9 with zero loss.
//
// A delivery is a lease: receiving a message moves its visible_at forward by
// the visibility timeout and increments its receive count in the same
// transaction, so a message that kills the process is counted before its
// handler runs. A retry is a new visible_at (the copy's receive count starts
// again); a dead-letter inserts the catalog entry and deletes the message in
// one transaction. Leases and acknowledgements are batched.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/transport"
)

var (
	_ transport.Transport       = (*Transport)(nil)
	_ transport.Declarer        = (*Transport)(nil)
	_ transport.LeaseRecoverer  = (*Transport)(nil)
	_ transport.InFlightCounter = (*Transport)(nil)
	_ transport.Featurer        = (*Transport)(nil)
	_ transport.TxPublisher     = (*Transport)(nil)
)

const schema = `
CREATE TABLE IF NOT EXISTS lily_queues (
	name       TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lily_messages (
	id            INTEGER PRIMARY KEY,
	queue         TEXT    NOT NULL,
	event_id      TEXT    NOT NULL,
	msg_key       TEXT    NOT NULL DEFAULT '',
	msg_type      TEXT    NOT NULL DEFAULT '',
	body          BLOB    NOT NULL,
	headers       BLOB,
	visible_at    INTEGER NOT NULL,
	receive_count INTEGER NOT NULL DEFAULT 0,
	lease_owner   TEXT,
	enqueued_at   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS lily_messages_ready ON lily_messages(queue, visible_at, id);
CREATE INDEX IF NOT EXISTS lily_messages_key ON lily_messages(queue, msg_key, id) WHERE msg_key != '';
`

// DefaultVisibilityTimeout is Options.VisibilityTimeout's default: how long
// a received message stays leased ('lily lint' compares a queue's
// handler_timeout_millis with it).
const DefaultVisibilityTimeout = 30 * time.Second

// Options configure the transport. The zero value is usable.
type Options struct {
	// VisibilityTimeout is how long a received message stays leased before
	// it is handed out again. Defaults to 30s.
	VisibilityTimeout time.Duration
	// PollInterval bounds how long Receive sleeps between looks at the
	// database when it was not woken by this process (another process may
	// have published). Defaults to 25ms.
	PollInterval time.Duration
	// Synchronous is SQLite's synchronous setting. Defaults to "FULL".
	Synchronous string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.VisibilityTimeout <= 0 {
		o.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 25 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Transport is the SQLite transport.
type Transport struct {
	db   *sql.DB
	opts Options
	st   *statements // prepared once on db

	mu      sync.Mutex
	wake    chan struct{} // closed and replaced when messages become ready
	closed  bool
	done    chan struct{}
	pending []*write // writes waiting for the writer (group.go)
	parked  []*write // leases waiting for a publish into their queue (group.go)

	kick       chan struct{} // tells the writer that writes are pending
	writerDone chan struct{} // closed when the writer has stopped
	groups     atomic.Int64  // groups the writer has taken
	shared     atomic.Int64  // writes committed in a transaction shared with others
}

// Open opens (creating if needed) the database file at path.
func Open(ctx context.Context, path string, opts Options) (*Transport, error) {
	opts = opts.withDefaults()
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: opts.Synchronous})
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite transport: create schema: %w", err)
	}
	if err := catalogdb.MigrateOnce(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	if err := migrateForeign(ctx, db); err != nil { // foreign.go: rows inserted without Publish
		db.Close()
		return nil, err
	}
	st, err := prepareStatements(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	t := &Transport{db: db, opts: opts, st: st, wake: make(chan struct{}), done: make(chan struct{}),
		kick: make(chan struct{}, 1), writerDone: make(chan struct{})}
	st.want = t.kickWriter
	go t.writeLoop()
	return t, nil
}

// DB returns the database handle, shared with the catalog (catalog.New).
func (t *Transport) DB() *sql.DB { return t.db }

// Close closes the database. Blocked Receive calls return ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	t.mu.Unlock()
	<-t.writerDone // the group in progress is committed or rolled back
	return errors.Join(t.st.close(), t.db.Close())
}

// Features describes the transport.
func (t *Transport) Features() transport.Features {
	return transport.Features{DelayedRetry: true, Leases: true, VisibilityTimeout: t.opts.VisibilityTimeout, CatalogParking: true, UnreceiveInPlace: true}
}

func (t *Transport) now() int64 { return t.opts.Now().UnixMilli() }

// signal wakes the Receive calls of this process.
func (t *Transport) signal() {
	t.mu.Lock()
	close(t.wake)
	t.wake = make(chan struct{})
	t.mu.Unlock()
}

// checkOpen returns ErrClosed after Close.
func (t *Transport) checkOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("sqlite transport: %w", transport.ErrClosed)
	}
	return nil
}

func (t *Transport) waiter() (<-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, transport.ErrClosed
	}
	return t.wake, nil
}

// Declare creates the queues (idempotent). Retry buckets need no tables:
// a delay is a visible_at in the future.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite transport: declare: %w", err)
	}
	defer tx.Rollback()
	for _, q := range p.Queues {
		if q.Name == "" {
			return errors.New("sqlite transport: declare: queue with empty name")
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_queues(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING`, q.Name, t.now()); err != nil {
			return fmt.Errorf("sqlite transport: declare %s: %w", q.Name, err)
		}
		if err := catalogdb.AddCountsTx(ctx, tx, q.Name, 0, 0); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Queues lists the declared queues.
func (t *Transport) Queues(ctx context.Context) ([]string, error) {
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := t.db.QueryContext(ctx, `SELECT name FROM lily_queues ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite transport: list queues: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// InFlight counts the queue's messages not yet acknowledged or
// dead-lettered: ready, leased or waiting for a retry delay.
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	var n int64
	if err := t.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_messages WHERE queue = ?`, queue).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite transport: count %s: %w", queue, err)
	}
	return n, nil
}

// RecoverLeases makes the leased messages of a consumer that is known to be
// dead visible again at once; their receive counts stay raised.
func (t *Transport) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	now := t.now()
	res, err := t.db.ExecContext(ctx, `UPDATE lily_messages SET visible_at = ?, lease_owner = NULL
		WHERE lease_owner = ? AND visible_at > ?`, now, p.Consumer, now)
	if err != nil {
		return 0, fmt.Errorf("sqlite transport: recover leases of %s: %w", p.Consumer, err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		t.signal()
	}
	return int(n), nil
}
