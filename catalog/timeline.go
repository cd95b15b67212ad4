package catalog

import (
	"context"
	"fmt"
	"slices"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// Span is a window of time cut into buckets (catalogdb.Span): bucket i
// covers [Start + i·Width, Start + (i+1)·Width).
type Span = catalogdb.Span

// EntryTimeline is what the catalog's entries tell over time, per queue
// and bucket of a Span.
type EntryTimeline struct {
	// DeadLettered counts the entries dead-lettered in each bucket
	// (lily_dlq_entries.dead_lettered_at): every dead letter, of every
	// transport, kept as long as its entry.
	DeadLettered map[string][]int64
	// Redriven counts the entries redriven in each bucket: the decision
	// time (decided_at) of entries in state redriven, released parked
	// entries included. An entry erased after its redrive is left out —
	// the erasure took its decision time; its redrive stays in the audit
	// log.
	Redriven map[string][]int64
}

// Timeline counts the entries dead-lettered and redriven per queue and
// bucket of sp; queue, when not empty, restricts it to that queue.
func (s *Store) Timeline(ctx context.Context, queue string, sp Span) (EntryTimeline, error) {
	var out EntryTimeline
	var err error
	if out.DeadLettered, err = catalogdb.CountBuckets(ctx, s.db, sp, queue, "lily_dlq_entries", "dead_lettered_at", ""); err != nil {
		return out, err
	}
	out.Redriven, err = catalogdb.CountBuckets(ctx, s.db, sp, queue, "lily_dlq_entries", "decided_at",
		"state = ? AND erased_at IS NULL", string(StateRedriven))
	return out, err
}

// QueueNames lists every queue the catalog knows, sorted: those with
// entries and those with a ledger.
func (s *Store) QueueNames(ctx context.Context) ([]string, error) {
	names, err := s.queues(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT queue FROM lily_ledger`)
	if err != nil {
		return nil, fmt.Errorf("catalog: list queues: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, err
		}
		if !slices.Contains(names, q) {
			names = append(names, q)
		}
	}
	slices.Sort(names)
	return names, rows.Err()
}
