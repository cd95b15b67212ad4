package ledger

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
)

// oldEvents writes n acked ledger rows recorded at the epoch, spread over
// three queues: every one is past any horizon.
func oldEvents(t *testing.T, db *catalogdb.DB, n int) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT 'q' || (i % 3), 'acked', 'e' || i, 1 FROM generate_series(1, CAST(? AS INTEGER)) AS i`, n); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresPruneTakesNoFleetLock: a prune completes while another
// process holds a decision's transaction and one old row (a count writing
// it): it deletes the others and leaves that one for the next prune.
// Before issue 29 each batch took the catalog's lock exclusively and
// waited.
func TestPostgresPruneTakesNoFleetLock(t *testing.T) {
	ss := openPGStores(t, 2)
	ctx := context.Background()
	oldEvents(t, catalogdb.Of(ss[0]), 10)
	held, err := catalogdb.Of(ss[0]).BeginKeyed(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	var id string
	if err := held.QueryRowContext(ctx, `SELECT event_id FROM lily_ledger_events WHERE event_id = 'e1' FOR UPDATE`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var res PruneResult
	if err := pgtest.Finishes(t, "a prune", func() (err error) {
		res, err = New(ss[1]).Prune(ctx, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res.Events != 9 {
		t.Errorf("pruned %d, want the 9 rows nobody holds", res.Events)
	}
}

// TestPostgresPrunersExact: four processes prune 2,500 old rows at once,
// in batches of 1,000: every row is deleted once and recorded once in
// lily_ledger_pruned, and no pruner fails (no deadlock between them).
func TestPostgresPrunersExact(t *testing.T) {
	const procs, n = 4, 2500
	ss := openPGStores(t, procs)
	ctx := context.Background()
	oldEvents(t, catalogdb.Of(ss[0]), n)
	var mu sync.Mutex
	var total int64
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			res, err := New(s).Prune(ctx, time.Now())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += res.Events
			mu.Unlock()
		})
	}
	wg.Wait()
	var left, recorded int64
	if err := ss[0].DB().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM lily_ledger_events), (SELECT COALESCE(SUM(events), 0) FROM lily_ledger_pruned)`).Scan(&left, &recorded); err != nil {
		t.Fatal(err)
	}
	if total != n || recorded != n || left != 0 {
		t.Errorf("pruned %d, recorded %d, %d rows left; want %d, %d, 0", total, recorded, left, n, n)
	}
}
