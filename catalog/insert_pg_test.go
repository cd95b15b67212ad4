package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/catalogtest"
)

// pgFleet opens n stores on one PostgreSQL schema: n processes of a fleet.
func pgFleet(t *testing.T, n int) []*catalog.Store { return catalogtest.PGFleet(t, n) }

// dlEntry is one dead-lettering of message id as a broker hand-off gives
// it: copy tells two hand-offs of it apart (their DLKeys differ).
func dlEntry(id string, copy int) *catalog.Entry {
	e := catalogtest.Entry("orders", id, evidence.ReasonPermanent, catalog.StatePending, "boom")
	e.DLKey = fmt.Sprintf("%s/%d", id, copy)
	return e
}

// TestPostgresInsertsOfOtherMessagesDoNotWait: while one process holds an
// Insert's transaction open (its dead-lettering not committed), another
// inserts a dead letter of another message. Before issue 29 every catalog
// transaction took one lock per schema and the second waited (the
// watchdog turns that hang into a failure).
func TestPostgresInsertsOfOtherMessagesDoNotWait(t *testing.T) {
	ss := pgFleet(t, 2)
	ctx := context.Background()
	x := dlEntry("x", 1)
	held, err := catalogdb.Of(ss[0]).BeginKeyed(ctx, []string{catalogdb.DupIdentity(x)})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := catalogdb.InsertEntries(ctx, held, []*catalog.Entry{x}); err != nil {
		t.Fatal(err)
	}
	// A watchdog, not a timing assertion: it only turns a hang into a
	// failure.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ss[1].Insert(wctx, dlEntry("y", 1)); err != nil {
		t.Fatalf("insert another message's dead letter while an insert is held: %v (want no wait)", err)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, distinct := catalogtest.Entries(t, ss[1], "orders"); n != 2 || distinct != 2 {
		t.Errorf("%d entries (%d distinct), want x and y", n, distinct)
	}
}

// TestPostgresDuplicateDeadLettersExact: four processes insert hand-offs
// of the same 40 dead-letterings at once (each its own DLKey, as a
// redelivered hand-off has). Each dead-lettering ends as one entry with
// the three others counted as its duplicates.
func TestPostgresDuplicateDeadLettersExact(t *testing.T) {
	const procs, msgs = 4, 40
	ss := pgFleet(t, procs)
	ctx := context.Background()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, procs)
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range msgs {
				// Batches of two, in a different order per process.
				a, b := (i+p*7)%msgs, (i+p*7+1)%msgs
				if err := ss[p].Insert(ctx, dlEntry(fmt.Sprint("m", a), p), dlEntry(fmt.Sprint("m", b), p+procs)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var entries, dups int64
	if err := ss[0].DB().QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(duplicates), 0) FROM lily_dlq_entries WHERE queue = 'orders'`).Scan(&entries, &dups); err != nil {
		t.Fatal(err)
	}
	// Each process hands off every message twice (as a and as b).
	if entries != msgs || dups != msgs*(2*procs-1) {
		t.Errorf("%d entries with %d duplicates, want %d entries with %d", entries, dups, msgs, msgs*(2*procs-1))
	}
}
