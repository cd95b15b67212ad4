package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/lily-mq/lily"
)

// Table names. They live in the application's own database, beside the
// tables the handler's effects write.
const (
	// TableInbox holds one row per (consumer, event ID) applied.
	TableInbox = "lily_inbox"
	// TableEntityVersions holds the newest applied version per entity.
	TableEntityVersions = "lily_entity_versions"
)

// Schema is the DDL Migrate runs, one statement per element, the same on
// SQLite and PostgreSQL. Apply it with your own migration tool instead of
// Migrate if you prefer; times are Unix milliseconds.
var Schema = []string{
	`CREATE TABLE IF NOT EXISTS lily_inbox (
		consumer   TEXT   NOT NULL,
		event_id   TEXT   NOT NULL,
		queue      TEXT   NOT NULL,
		applied_at BIGINT NOT NULL,
		PRIMARY KEY (consumer, event_id)
	)`,
	`CREATE INDEX IF NOT EXISTS lily_inbox_applied_at ON lily_inbox (applied_at)`,
	`CREATE TABLE IF NOT EXISTS lily_entity_versions (
		entity_type TEXT   NOT NULL,
		entity_id   TEXT   NOT NULL,
		version     BIGINT NOT NULL,
		updated_at  BIGINT NOT NULL,
		PRIMARY KEY (entity_type, entity_id)
	)`,
}

// Migrate creates the inbox and version tables if they do not exist. db
// is a *sql.DB (SQLite or PostgreSQL) or a pgx pool/connection (see Tx).
// Run it once at startup, before the consumers.
func Migrate(ctx context.Context, db Tx) error {
	h, err := open(db)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	for _, q := range Schema {
		if _, err := h.exec(ctx, q); err != nil {
			return fmt.Errorf("inbox: migrate: %w", err)
		}
	}
	return nil
}

// pruneBatch is how many inbox rows one Prune statement deletes.
const pruneBatch = 5000

// Prune deletes the inbox marks applied before olderThan, in batches, and
// returns how many it deleted. Entity versions are never pruned: a stale
// message must find its entity's version however late it comes.
//
// The horizon must cover the latest a duplicate can arrive: a redrive can
// bring a message back as late as the dead-letter retention of its queue,
// so keep marks at least that long (Horizon). A mark pruned too early lets
// a late redrive apply its effect a second time.
func Prune(ctx context.Context, db Tx, olderThan time.Time) (int64, error) {
	h, err := open(db)
	if err != nil {
		return 0, fmt.Errorf("inbox: prune: %w", err)
	}
	var total int64
	for {
		n, err := h.exec(ctx, `DELETE FROM lily_inbox WHERE (consumer, event_id) IN
			(SELECT consumer, event_id FROM lily_inbox WHERE applied_at < $1 LIMIT $2)`,
			olderThan.UnixMilli(), pruneBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("inbox: prune marks before %s: %w", olderThan.UTC().Format(time.RFC3339), err)
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

// HorizonMargin is what Horizon adds to a queue's dead-letter retention:
// room for a redrive started on the retention's last day, and for the
// messages still circulating in retry buckets.
const HorizonMargin = 24 * time.Hour

// Horizon is how long to keep a queue's inbox marks: its dead-letter
// retention (dlq_retention_hours, default 14 days) plus HorizonMargin.
// Prune with time.Now().Add(-Horizon(qc)).
func Horizon(qc lily.QueueConfig) time.Duration {
	return time.Duration(qc.Settings().DLQRetentionHours)*time.Hour + HorizonMargin
}
