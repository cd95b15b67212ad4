package catalog_test

import (
	"context"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
)

// TestPostgresNoDecisionWaitsForAnotherTransaction: while one process
// holds a plain catalog transaction open (with an audit record written in
// it), another inserts a dead letter and discards an entry. Before the
// last step of issue 29 a plain transaction took the catalog's write lock
// exclusively, and every decision of the fleet waited for it.
func TestPostgresNoDecisionWaitsForAnotherTransaction(t *testing.T) {
	ss := pgFleet(t, 2)
	ctx := context.Background()
	insertPending(t, ss[0], 1)
	held, err := catalogdb.Of(ss[0]).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := catalogdb.AppendAudit(ctx, held, &catalog.AuditRecord{Op: "held", Actor: "t", Action: catalog.ActionDiscard, Outcome: catalog.OutcomeDiscarded}); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Finishes(t, "an insert", func() error { return ss[1].Insert(ctx, dlEntry("x", 1)) }); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Finishes(t, "a discard", func() error {
		_, err := ss[1].Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{EventIDs: []string{"e0"}}, Reason: "test", Actor: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
