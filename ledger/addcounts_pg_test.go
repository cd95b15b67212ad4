package ledger

import (
	"context"
	"sync"
	"testing"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
)

// TestPostgresAddCountsTakesNoLock: a transport counting outside the
// catalog adds to a queue's counters while another process holds a
// decision's transaction (one that locks only its own rows). Before issue
// 29 AddCounts took the catalog's lock exclusively and waited.
func TestPostgresAddCountsTakesNoLock(t *testing.T) {
	ss := openPGStores(t, 2)
	ctx := context.Background()
	held, err := catalogdb.Of(ss[0]).BeginKeyed(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := catalogdb.AddCounts(ctx, held, "other", 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Finishes(t, "AddCounts", func() error { return New(ss[1]).AddCounts(ctx, "q", 2, 1) }); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresAddCountsExact: four processes add to one queue's counters
// 50 times each at once: no addition is lost.
func TestPostgresAddCountsExact(t *testing.T) {
	const procs, each = 4, 50
	ss := openPGStores(t, procs)
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			l := New(s)
			for range each {
				if err := l.AddCounts(ctx, "q", 1, 2); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var accepted, acked int64
	if err := ss[0].DB().QueryRowContext(ctx, `SELECT accepted, acked FROM lily_ledger WHERE queue = 'q'`).Scan(&accepted, &acked); err != nil {
		t.Fatal(err)
	}
	if accepted != procs*each || acked != 2*procs*each {
		t.Errorf("accepted %d, acked %d; want %d and %d", accepted, acked, procs*each, 2*procs*each)
	}
}
