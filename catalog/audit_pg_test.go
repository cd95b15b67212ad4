package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
)

// holdDecision opens, in store s, a transaction of a decision that locks
// rows of its own (a keyed transaction) and appends an audit record in it
// without committing; it is rolled back when the test ends.
func holdDecision(t *testing.T, s *catalog.Store) *catalogdb.Tx {
	t.Helper()
	tx, err := catalogdb.Of(s).BeginKeyed(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if err := catalogdb.AppendAudit(context.Background(), tx, &catalog.AuditRecord{Op: "held", Actor: "t", Action: catalog.ActionDiscard, Outcome: catalog.OutcomeDiscarded}); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestPostgresAuditAppendTakesNoLock: an audit record is appended while
// another process holds a decision's transaction with an uncommitted
// record. Before issue 29 the append took the catalog's lock exclusively
// and waited.
func TestPostgresAuditAppendTakesNoLock(t *testing.T) {
	ss := pgFleet(t, 2)
	holdDecision(t, ss[0])
	r := &catalog.AuditRecord{Op: "free", Actor: "t", Action: catalog.ActionRedrive, Outcome: catalog.OutcomeEmpty}
	if err := pgtest.Finishes(t, "an audit append", func() error { return ss[1].AppendAudit(context.Background(), r) }); err != nil {
		t.Fatal(err)
	}
	if r.ID == 0 {
		t.Error("the appended record has no ID")
	}
}

// TestPostgresAuditAppendsExact: four processes append 50 records each at
// once: all 200 are in the log, each under an ID of its own.
func TestPostgresAuditAppendsExact(t *testing.T) {
	const procs, each = 4, 50
	ss := pgFleet(t, procs)
	ctx := context.Background()
	var wg sync.WaitGroup
	for p, s := range ss {
		wg.Go(func() {
			for i := range each {
				r := &catalog.AuditRecord{Op: fmt.Sprintf("p%d-%d", p, i), Actor: "t", Action: catalog.ActionRedrive, Outcome: catalog.OutcomeEmpty}
				if err := s.AppendAudit(ctx, r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	ops, ids := map[string]bool{}, map[int64]bool{}
	if err := ss[0].EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
		ops[r.Op], ids[r.ID] = true, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ops) != procs*each || len(ids) != procs*each {
		t.Errorf("%d ops under %d IDs in the log, want %d each", len(ops), len(ids), procs*each)
	}
}
