package catalog

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// registerForeign records queue as a foreign dead-letter queue of kind.
func registerForeign(ctx context.Context, tx *catalogdb.Tx, queue, kind string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO lily_foreign_queues(queue, kind) VALUES (?, ?) ON CONFLICT(queue) DO UPDATE SET kind = excluded.kind`, queue, kind)
	if err != nil {
		return fmt.Errorf("catalog: register foreign dead-letter queue %s: %w", queue, err)
	}
	return nil
}

// ForeignQueues returns the foreign dead-letter queues ingested so far and
// their kinds.
func (s *Store) ForeignQueues(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT queue, kind FROM lily_foreign_queues`)
	if err != nil {
		return nil, fmt.Errorf("catalog: foreign queues: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var q, k string
		if err := rows.Scan(&q, &k); err != nil {
			return nil, err
		}
		out[q] = k
	}
	return out, rows.Err()
}

// countForeignAccepted registers a foreign queue and counts the entries of
// a batch that were added (not ingested before) accepted.
func countForeignAccepted(ctx context.Context, tx *catalogdb.Tx, queue, kind string, entries []*Entry) error {
	if err := registerForeign(ctx, tx, queue, kind); err != nil {
		return err
	}
	var added int64
	for _, e := range entries {
		if e.ID != 0 {
			added++
		}
	}
	if added == 0 {
		return nil
	}
	return catalogdb.AddCounts(ctx, tx, queue, added, 0)
}

// hasLilyReason reports whether d carries Lily's own dead-letter reason.
func hasLilyReason(d *transport.Delivery) bool {
	_, ok := d.Headers[evidence.HeaderReason]
	return ok
}
