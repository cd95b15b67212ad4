package catalog

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
)

// RefusedHeld counts, per queue, the held entries that are in the catalog
// only because the broker refused their dead-letter copy (a full
// dead-letter queue, a copy too large for it: ledger.Accounted stored them
// here and acknowledged their originals; their headers carry
// evidence.HeaderDLQRefused). While any is held, the broker's dead-letter
// queue needs an operator: /healthz says so.
func (s *Store) RefusedHeld(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT e.queue, COUNT(*) FROM lily_dlq_entries e
		WHERE e.`+catalogdb.HeldCond+` AND e.dl_key LIKE ? GROUP BY e.queue`, evidence.DLKeyRefusedPrefix+"%")
	if err != nil {
		return nil, fmt.Errorf("catalog: count dead letters the broker refused: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return nil, err
		}
		out[q] = n
	}
	return out, rows.Err()
}
