package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// The bounded ledger (docs/design.md §9, docs/ledger.md).
//
// For a broker transport the ledger remembers every message identity it
// counted (lily_ledger_events: one row per message, kind "accepted",
// turned "acked" when it is acked; count.go), so that a redelivery,
// a retry copy back from its bucket or a redriven message is not counted
// again. The counts themselves are not computed from those rows:
// lily_ledger.accepted and lily_ledger.acked are running counters, raised
// in the same transaction that inserts or turns the row.
// So a row is only deduplication memory, and it is needed only as long as
// the same message can come back: the deduplication horizon. Prune
// deletes the rows older than the horizon; the counters already hold them
// ("folded"), so reconcile gives the same figures before and after, and
// two processes pruning at once cannot fold anything twice — a delete
// changes no counter. What each transaction deleted (DELETE … RETURNING)
// is added to lily_ledger_pruned in that same transaction, so the record
// of what was pruned is exact under concurrency too.
//
// The trade-off: a message seen again after its row was pruned is counted
// again — accepted and, if acked again, acked too (the ledger still
// balances, its totals one too high), or accepted alone (lost shows > 0, a
// false alarm that could also hide a real loss of another message of the
// same queue). The horizon is therefore chosen
// longer than any way the same message can come back within Lily's
// bounds: a broker redelivery, the retry span, and up to max_redrives
// redrives, each within dlq_retention_hours (config.LedgerHorizonFloor).

// DefaultHorizon is the deduplication horizon of a Ledger whose horizon
// was not set (SetHorizon): 30 days. It covers the default
// queue settings with room to spare: no retries, max_redrives 2 and
// dlq_retention_hours 336 (14 days) — a message redriven twice comes back
// at most 28 days after it was accepted — plus a day for backlogs and
// broker redeliveries.
const DefaultHorizon = 720 * time.Hour

// pruneBatch is the most rows one pruning transaction deletes, so that a
// first prune of a large, never-pruned ledger does not hold the write lock
// for long: between two batches Prune pauses as long as the last
// batch took, so that other writers (consumers counting their messages,
// another pruner) get the lock at least half of the time.
const pruneBatch = 1000

// SetHorizon sets how long the ledger keeps per-event rows before Prune
// folds them (config key ledger_horizon_hours). It must be
// longer than the longest time after which the same message can come back
// (config.LedgerHorizonFloor); d must be positive.
func (l *Ledger) SetHorizon(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("catalog: ledger horizon %v: must be positive (e.g. %v, the default)", d, DefaultHorizon)
	}
	l.horizon.Store(int64(d))
	return nil
}

// Horizon returns the deduplication horizon in use.
func (l *Ledger) Horizon() time.Duration {
	if d := l.horizon.Load(); d > 0 {
		return time.Duration(d)
	}
	return DefaultHorizon
}

// PruneResult is what one Prune call folded.
type PruneResult struct {
	// Cutoff: event rows recorded before it were folded.
	Cutoff time.Time
	// Events is how many rows this call deleted (a concurrent pruner's
	// rows are its own).
	Events int64
}

// Prune folds the per-event ledger rows recorded before now minus
// the horizon into the per-queue counters, that is deletes them (the
// counters hold them already), in transactions of at most pruneBatch rows (paced, see pruneBatch),
// each adding what it deleted to lily_ledger_pruned. It is safe to run from
// several processes at once on one catalog.
func (l *Ledger) Prune(ctx context.Context, now time.Time) (PruneResult, error) {
	cutoff := now.Add(-l.Horizon())
	res := PruneResult{Cutoff: cutoff}
	if l.db.Dialect() == catalogdb.Postgres {
		// Fold the per-writer counters into lily_ledger, so that their
		// table stays as small as the fleet (catalogdb.FoldLedgerDeltasSQL).
		if _, err := l.db.ExecContext(ctx, catalogdb.FoldLedgerDeltasSQL); err != nil {
			return res, fmt.Errorf("catalog: fold ledger counters: %w", err)
		}
	}
	for {
		began := time.Now()
		n, err := l.pruneBatch(ctx, cutoff.UnixMilli())
		res.Events += n
		if err != nil {
			return res, err
		}
		if n < pruneBatch {
			// Rows of an older Lily may have been the ones pruned: ask
			// again on the next count.
			l.legacy.CompareAndSwap(legacyPresent, legacyUnknown)
			return res, nil
		}
		pause := time.NewTimer(time.Since(began))
		select {
		case <-ctx.Done():
			pause.Stop()
			return res, ctx.Err()
		case <-pause.C:
		}
	}
}

// pruneBatch deletes up to pruneBatch rows older than cutoff (Unix ms) and
// records them in lily_ledger_pruned, in one transaction.
func (l *Ledger) pruneBatch(ctx context.Context, cutoff int64) (int64, error) {
	// On PostgreSQL the batch locks only its rows: SKIP LOCKED gives two
	// pruners disjoint batches (and never a deadlock between them), and
	// leaves a row a count is writing for the next prune; RETURNING says
	// what this batch deleted.
	tx, err := l.db.BeginKeyed(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("catalog: prune ledger: %w", err)
	}
	defer tx.Rollback()
	skip := ""
	if tx.Dialect() == catalogdb.Postgres {
		skip = " FOR UPDATE SKIP LOCKED"
	}
	rows, err := tx.QueryContext(ctx, `DELETE FROM lily_ledger_events WHERE (queue, kind, event_id) IN
		(SELECT queue, kind, event_id FROM lily_ledger_events WHERE at < ? ORDER BY at LIMIT ?`+skip+`)
		RETURNING queue, kind`, cutoff, pruneBatch)
	if err != nil {
		return 0, fmt.Errorf("catalog: prune ledger events before %d: %w", cutoff, err)
	}
	type qk struct{ queue, kind string }
	deleted := map[qk]int64{}
	var total int64
	for rows.Next() {
		var k qk
		if err := rows.Scan(&k.queue, &k.kind); err != nil {
			rows.Close()
			return 0, fmt.Errorf("catalog: prune ledger: %w", err)
		}
		deleted[k]++
		total++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("catalog: prune ledger: %w", err)
	}
	if total == 0 {
		return 0, nil
	}
	// In one order, so that two pruners' records never wait in a cycle.
	ks := slices.SortedFunc(maps.Keys(deleted), func(a, b qk) int { return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.kind, b.kind)) })
	for _, k := range ks {
		n := deleted[k]
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_ledger_pruned(queue, kind, events, through) VALUES (?, ?, ?, ?)
			ON CONFLICT (queue, kind) DO UPDATE SET events = lily_ledger_pruned.events + excluded.events,
				through = CASE WHEN excluded.through > lily_ledger_pruned.through THEN excluded.through ELSE lily_ledger_pruned.through END`,
			k.queue, k.kind, n, cutoff); err != nil {
			return 0, fmt.Errorf("catalog: record pruned ledger events of %s: %w", k.queue, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("catalog: prune ledger: %w", err)
	}
	return total, nil
}

// EventStats describes one queue's deduplication memory.
type EventStats struct {
	Queue string
	// Kept is the number of per-event rows held (accepted and acked).
	Kept int64
	// Pruned is the number of rows folded so far, by every pruner.
	Pruned int64
	// PrunedThrough: rows recorded before it are folded (zero: none yet).
	PrunedThrough time.Time
}

// Events returns the per-queue size of the deduplication memory,
// sorted by queue.
func (l *Ledger) Events(ctx context.Context) ([]EventStats, error) {
	byQueue := map[string]*EventStats{}
	var order []string
	get := func(q string) *EventStats {
		st, ok := byQueue[q]
		if !ok {
			st = &EventStats{Queue: q}
			byQueue[q] = st
			order = append(order, q)
		}
		return st
	}
	scan := func(query string, fn func(*sql.Rows) error) error {
		rows, err := l.db.QueryContext(ctx, query)
		if err != nil {
			return fmt.Errorf("catalog: ledger events: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := fn(rows); err != nil {
				return fmt.Errorf("catalog: ledger events: %w", err)
			}
		}
		return rows.Err()
	}
	if err := scan(`SELECT queue, COUNT(*) FROM lily_ledger_events GROUP BY queue`, func(r *sql.Rows) error {
		var q string
		var n int64
		if err := r.Scan(&q, &n); err != nil {
			return err
		}
		get(q).Kept = n
		return nil
	}); err != nil {
		return nil, err
	}
	if err := scan(`SELECT queue, CAST(SUM(events) AS BIGINT), MAX(through) FROM lily_ledger_pruned GROUP BY queue`, func(r *sql.Rows) error {
		var q string
		var n, through int64
		if err := r.Scan(&q, &n, &through); err != nil {
			return err
		}
		st := get(q)
		st.Pruned = n
		if through > 0 {
			st.PrunedThrough = time.UnixMilli(through)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]EventStats, 0, len(order))
	slices.Sort(order)
	for _, q := range order {
		out = append(out, *byQueue[q])
	}
	return out, nil
}

// RunPruner prunes the ledger every interval until ctx ends, for a
// long-running process that holds the catalog (lily serve); errors are
// logged, not fatal (the next round tries again). It returns ctx's error.
func (l *Ledger) RunPruner(ctx context.Context, interval time.Duration, log *slog.Logger) error {
	if interval <= 0 {
		return fmt.Errorf("catalog: ledger prune interval %v: must be positive (e.g. 10m)", interval)
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := l.Prune(ctx, time.Now())
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			log.Error("pruning the ledger failed; its per-event rows grow until a prune succeeds", "err", err, "horizon", l.Horizon())
		case res.Events > 0:
			log.Info("pruned the ledger", "events", res.Events, "cutoff", res.Cutoff.UTC().Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
