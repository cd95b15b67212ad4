package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// Table is the outbox table, in the application's own database.
const Table = "lily_outbox"

// Message is one message to publish once the business transaction
// commits: its destination queue and the message itself.
type Message struct {
	// Queue is the destination queue (or topic). Required.
	Queue string
	// Message is what is published; an empty EventID gets a new UUIDv7
	// (written back), which the relay keeps however often it publishes.
	// Messages of one Key (to one Queue) are published in the order they
	// were added; messages without a Key are not ordered among themselves.
	lily.Message
}

// schemaTable is the outbox table; SQLite and PostgreSQL differ only in
// the ID and body types (%[1]s, %[2]s).
const schemaTable = `CREATE TABLE IF NOT EXISTS lily_outbox (
		id              %[1]s,
		queue           TEXT    NOT NULL,
		okey            TEXT    NOT NULL,
		event_id        TEXT    NOT NULL,
		msg_key         TEXT    NOT NULL,
		msg_type        TEXT    NOT NULL,
		body            %[2]s   NOT NULL,
		headers         TEXT    NOT NULL,
		schema_version  INTEGER NOT NULL,
		created_at      BIGINT  NOT NULL,
		attempts        INTEGER NOT NULL DEFAULT 0,
		last_error      TEXT    NOT NULL DEFAULT '',
		next_attempt_at BIGINT  NOT NULL DEFAULT 0,
		published_at    BIGINT
	)`

var (
	schemaSQLite   = []string{fmt.Sprintf(schemaTable, "INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB")}
	schemaPostgres = []string{fmt.Sprintf(schemaTable, "BIGSERIAL PRIMARY KEY", "BYTEA")}
	schemaIndexes  = []string{
		`CREATE INDEX IF NOT EXISTS lily_outbox_pending ON lily_outbox (id) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS lily_outbox_okey ON lily_outbox (okey, id) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS lily_outbox_published ON lily_outbox (published_at) WHERE published_at IS NOT NULL`,
	}
)

// Migrate creates the outbox table and its indexes if they do not exist.
// db is a *sql.DB (SQLite or PostgreSQL) or a pgx pool/connection.
func Migrate(ctx context.Context, db DB) error {
	d, err := dialectOf(db)
	if err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	stmts := schemaPostgres
	if d == dialectSQLite {
		stmts = schemaSQLite
	}
	for _, q := range append(append([]string(nil), stmts...), schemaIndexes...) {
		if _, err := exec(ctx, db, q); err != nil {
			return fmt.Errorf("outbox: migrate: %w", err)
		}
	}
	return nil
}

// orderKey is the ordering key of a message: its queue and key, or, for a
// message without a key, its own event ID (no order to keep).
func orderKey(m Message) string {
	if m.Key == "" {
		return "#" + m.EventID // queue names start with a letter or digit
	}
	return m.Queue + " " + m.Key // queue names have no spaces
}

// Add writes msgs into the outbox inside tx, the business transaction:
// they are published (by a Relay) if and only if tx commits. A message
// without an EventID gets a new one, written back into msgs.
//
// For per-key order on PostgreSQL, add a key's messages after the write
// that locks the entity (an UPDATE of its row): two transactions on one
// entity then commit their outbox rows in the order of their IDs.
func Add(ctx context.Context, tx Tx, msgs ...Message) error {
	now := time.Now().UnixMilli()
	for i := range msgs {
		m := &msgs[i]
		var errs []error
		if m.Queue == "" {
			errs = append(errs, errors.New("Queue is empty: name the destination queue"))
		}
		if m.SchemaVersion < 0 {
			errs = append(errs, fmt.Errorf("SchemaVersion %d: must be >= 0", m.SchemaVersion))
		}
		if len(errs) > 0 {
			return fmt.Errorf("outbox: add message %d: %w", i, errors.Join(errs...))
		}
		if m.EventID == "" {
			m.EventID = lily.NewEventID()
		}
		hdr, err := transport.MarshalHeaders(m.Headers)
		if err != nil {
			return fmt.Errorf("outbox: add message %d (%s): headers: %w", i, m.EventID, err)
		}
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		if _, err := exec(ctx, tx, `INSERT INTO lily_outbox (queue, okey, event_id, msg_key, msg_type, body, headers, schema_version, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			m.Queue, orderKey(*m), m.EventID, m.Key, m.Type, body, string(hdr), m.SchemaVersion, now); err != nil {
			return fmt.Errorf("outbox: add message %d (%s) for %s: %w (did you run outbox.Migrate?)", i, m.EventID, m.Queue, err)
		}
	}
	return nil
}

// Prune deletes rows published before olderThan and returns how many.
// Unpublished rows are never pruned.
func Prune(ctx context.Context, db DB, olderThan time.Time) (int64, error) {
	n, err := exec(ctx, db, `DELETE FROM lily_outbox WHERE published_at IS NOT NULL AND published_at < $1`, olderThan.UnixMilli())
	if err != nil {
		return n, fmt.Errorf("outbox: prune: %w", err)
	}
	return n, nil
}
