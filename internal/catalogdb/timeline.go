package catalogdb

// Counting rows over time for the console's charts (GET /api/timeline):
// the same bucketing statement for every table that keeps a time, on both
// stores.

import (
	"context"
	"fmt"
	"time"
)

// Span is a window of time cut into N buckets of Width: bucket i covers
// [Start + i·Width, Start + (i+1)·Width), start included, end excluded.
type Span struct {
	Start time.Time
	Width time.Duration
	N     int
}

// End is the end of the last bucket (excluded).
func (sp Span) End() time.Time { return sp.Start.Add(time.Duration(sp.N) * sp.Width) }

// Check reports a span that cannot be counted: no bucket, or a width that
// is not a positive number of milliseconds (times are Unix milliseconds).
func (sp Span) Check() error {
	if sp.N <= 0 || sp.Width < time.Millisecond || sp.Width%time.Millisecond != 0 {
		return fmt.Errorf("catalog: timeline: want n > 0 buckets of a positive whole number of milliseconds, got %d of %s", sp.N, sp.Width)
	}
	return nil
}

// CountBuckets counts, per queue and bucket of sp, the rows of table that
// match where (a condition with its args, or "" for all) whose column col
// — a time in Unix milliseconds — falls in sp. queue, when not empty,
// restricts the count to that queue. The division happens in SQL (integer
// division of the time since the span's start), so only one row per queue
// and bucket leaves the database.
func CountBuckets(ctx context.Context, q Querier, sp Span, queue, table, col, where string, args ...any) (map[string][]int64, error) {
	if err := sp.Check(); err != nil {
		return nil, err
	}
	start, end, width := sp.Start.UnixMilli(), sp.End().UnixMilli(), sp.Width.Milliseconds()
	cond := col + ` >= ? AND ` + col + ` < ?`
	all := []any{start, width, start, end}
	if where != "" {
		cond += ` AND (` + where + `)`
		all = append(all, args...)
	}
	if queue != "" {
		cond += ` AND queue = ?`
		all = append(all, queue)
	}
	rows, err := q.QueryContext(ctx, `SELECT queue, (`+col+` - CAST(? AS BIGINT)) / CAST(? AS BIGINT) AS b, COUNT(*) FROM `+table+`
		WHERE `+cond+` GROUP BY queue, b`, all...)
	if err != nil {
		return nil, fmt.Errorf("catalog: timeline of %s.%s: %w", table, col, err)
	}
	defer rows.Close()
	out := map[string][]int64{}
	for rows.Next() {
		var qn string
		var b, n int64
		if err := rows.Scan(&qn, &b, &n); err != nil {
			return nil, fmt.Errorf("catalog: timeline of %s.%s: %w", table, col, err)
		}
		if b < 0 || b >= int64(sp.N) {
			continue // cannot happen: the WHERE bounds the time
		}
		if out[qn] == nil {
			out[qn] = make([]int64, sp.N)
		}
		out[qn][b] += n
	}
	return out, rows.Err()
}
