package catalog

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// GroupColumns are the columns Group accepts.
var GroupColumns = []string{"reason", "error_type", "fingerprint", "consumer_version", "source", "queue", "state", "schema_version"}

// Group is one group of entries sharing a value of the grouping column.
type Group struct {
	// Key is the shared value.
	Key string `json:"key"`
	// Count is the number of entries.
	Count int64 `json:"count"`
	// FirstSeen and LastSeen are the earliest and latest dead-lettering.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// SampleID is the ID of the group's most recent entry.
	SampleID int64 `json:"sample_id"`
	// Triage, grouped by fingerprint, are the triage records of the group
	// in each queue that has one (AttachGroupTriage).
	Triage []GroupTriage `json:"triage,omitempty"`
}

// Group groups the entries matching f by column (one of GroupColumns):
// counts, first and last seen, one sample entry ID per group; largest
// groups first. Grouped by schema_version, the key is the decimal version,
// or "" for entries without one. The fingerprint column groups error messages that differ
// only in numbers, IDs and quoted values (evidence.Fingerprint). It is one
// aggregate query: nothing is loaded but the groups.
func (s *Store) Group(ctx context.Context, column string, f Filter) ([]Group, error) {
	if !validGroupColumn(column) {
		return nil, fmt.Errorf("catalog: cannot group by %q: use reason, error_type, fingerprint, consumer_version, source, queue, state or schema_version", column)
	}
	sel := column
	if column == "schema_version" {
		sel = "COALESCE(CAST(schema_version AS TEXT), '')" // "" = no schema version
	}
	where, args := f.where()
	table := "lily_dlq_entries"
	if s.db.Dialect() == catalogdb.SQLite && column != "queue" && column != "state" && f.allHeld() {
		// The grouping column's covering index over held entries, read in
		// order: no sort, no table access (unless f filters on columns
		// other than state, queue and time).
		table += " INDEXED BY lily_dlq_entries_held_" + column
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+sel+`, COUNT(*), MIN(dead_lettered_at), MAX(dead_lettered_at), MAX(id)
		FROM `+table+where+` GROUP BY `+column, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: group by %s: %w", column, err)
	}
	defer rows.Close()
	var out []Group
	for rows.Next() {
		var g Group
		var first, last int64
		if err := rows.Scan(&g.Key, &g.Count, &first, &last, &g.SampleID); err != nil {
			return nil, err
		}
		g.FirstSeen, g.LastSeen = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

func validGroupColumn(c string) bool {
	for _, g := range GroupColumns {
		if c == g {
			return true
		}
	}
	return false
}

// QueueStats describes one queue's dead-letter work list (lily dlq list).
type QueueStats struct {
	Queue string `json:"queue"`
	// Depth is the number of held entries: Pending + Parked + NeedsManual.
	Depth       int64 `json:"depth"`
	Pending     int64 `json:"pending"`
	Parked      int64 `json:"parked"`
	NeedsManual int64 `json:"needs_manual"`
	// Oldest is when the oldest held entry was dead-lettered (zero if none).
	Oldest time.Time `json:"oldest,omitzero"`
	// Retention is the queue's dlq_retention_hours.
	Retention time.Duration `json:"-"`
	// Deadline is when the oldest held entry reaches its retention and is
	// discarded with a record (zero if none).
	Deadline time.Time `json:"deadline,omitzero"`
	// PastHalfRetention counts held entries older than half the retention:
	// the alarm before the deadline.
	PastHalfRetention int64 `json:"past_half_retention"`
	// InflowLastHour counts entries dead-lettered in the last hour.
	InflowLastHour int64 `json:"inflow_last_hour"`
}

// Stats returns the work-list figures of every queue with entries or a
// ledger, sorted by name. retention returns a queue's retention (nil, or
// a result <= 0, means DefaultRetention).
func (s *Store) Stats(ctx context.Context, now time.Time, retention func(queue string) time.Duration) ([]QueueStats, error) {
	names, err := s.QueueNames(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]QueueStats, 0, len(names))
	for _, q := range names {
		st, err := s.queueStats(ctx, q, now, retention)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func (s *Store) queueStats(ctx context.Context, q string, now time.Time, retention func(string) time.Duration) (QueueStats, error) {
	st := QueueStats{Queue: q, Retention: DefaultRetention}
	if retention != nil {
		if r := retention(q); r > 0 {
			st.Retention = r
		}
	}
	half := now.Add(-st.Retention / 2).UnixMilli()
	rows, err := s.db.QueryContext(ctx, `SELECT state, COUNT(*), MIN(dead_lettered_at), COALESCE(SUM(CASE WHEN dead_lettered_at < ? THEN 1 ELSE 0 END), 0)
		FROM lily_dlq_entries WHERE state IN ('pending', 'parked', 'needs_manual') AND queue = ? GROUP BY state`, half, q)
	if err != nil {
		return st, fmt.Errorf("catalog: stats of %s: %w", q, err)
	}
	defer rows.Close()
	var oldest int64
	for rows.Next() {
		var state string
		var n, minAt, past int64
		if err := rows.Scan(&state, &n, &minAt, &past); err != nil {
			return st, err
		}
		switch State(state) {
		case StatePending:
			st.Pending = n
		case StateParked:
			st.Parked = n
		case StateNeedsManual:
			st.NeedsManual = n
		}
		st.Depth += n
		st.PastHalfRetention += past
		if oldest == 0 || minAt < oldest {
			oldest = minAt
		}
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows.Close()
	if st.Depth > 0 {
		st.Oldest = time.UnixMilli(oldest).UTC()
		st.Deadline = st.Oldest.Add(st.Retention)
	}
	// Every state is listed so that the (state, queue, time) index serves it.
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_dlq_entries
		WHERE state IN ('pending', 'redriven', 'discarded', 'parked', 'needs_manual', 'erased') AND queue = ? AND dead_lettered_at >= ?`,
		q, now.Add(-time.Hour).UnixMilli()).Scan(&st.InflowLastHour)
	if err != nil {
		return st, fmt.Errorf("catalog: inflow of %s: %w", q, err)
	}
	return st, nil
}

// List returns up to limit entries matching f in ID order (for peek).
func (s *Store) List(ctx context.Context, f Filter, limit int) ([]*Entry, error) {
	if limit <= 0 {
		limit = 10
	}
	var out []*Entry
	for _, sf := range f.perState() {
		es, err := s.page(ctx, sf, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// page returns up to n entries matching f (with bodies) in ID order.
func (s *Store) page(ctx context.Context, f Filter, n int) ([]*Entry, error) {
	where, args := f.where()
	rows, err := s.db.QueryContext(ctx, `SELECT `+catalogdb.SelectCols+` FROM `+f.table(s.db.Dialect())+where+` ORDER BY id LIMIT ?`, append(args, n)...)
	if err != nil {
		return nil, fmt.Errorf("catalog: select entries: %w", err)
	}
	defer rows.Close()
	var out []*Entry
	for rows.Next() {
		e, err := catalogdb.ScanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
