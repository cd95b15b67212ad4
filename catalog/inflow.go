package catalog

import (
	"context"
	"fmt"
	"time"
)

// Inflow counts the entries of queue dead-lettered in each of n buckets of
// width bucket ending at now, oldest bucket first: out[n-1] covers
// (now−bucket, now]. It reads the (queue, time) index only.
func (s *Store) Inflow(ctx context.Context, queue string, now time.Time, bucket time.Duration, n int) ([]int64, error) {
	if n <= 0 || bucket <= 0 {
		return nil, fmt.Errorf("catalog: inflow of %s: want n > 0 buckets of a positive width, got %d of %s", queue, n, bucket)
	}
	out := make([]int64, n)
	end := now.UnixMilli()
	start := end - int64(n)*bucket.Milliseconds()
	rows, err := s.db.QueryContext(ctx, `SELECT (? - dead_lettered_at) / ?, COUNT(*) FROM lily_dlq_entries
		WHERE queue = ? AND dead_lettered_at > ? AND dead_lettered_at <= ? GROUP BY 1`,
		end, bucket.Milliseconds(), queue, start, end)
	if err != nil {
		return nil, fmt.Errorf("catalog: inflow of %s: %w", queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		var ago, c int64
		if err := rows.Scan(&ago, &c); err != nil {
			return nil, err
		}
		if i := n - 1 - int(ago); i >= 0 && i < n {
			out[i] += c
		}
	}
	return out, rows.Err()
}
