package catalog_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/pgtest"
)

// exportFile returns an export of 30 entries, five of them discarded (so
// that lines carry history records).
func exportFile(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	src := pgFleet(t, 1)[0]
	insertPending(t, src, 30)
	if _, err := src.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{EventIDs: []string{"e0", "e1", "e2", "e3", "e4"}}, Reason: "bad", Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := src.Export(ctx, &buf, catalog.ExportParams{Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPostgresImportTakesNoFleetLock: an import completes while another
// process holds an entry's row in a decision's transaction. Before issue
// 29 each batch took the catalog's lock exclusively and waited.
func TestPostgresImportTakesNoFleetLock(t *testing.T) {
	file := exportFile(t)
	ss := pgFleet(t, 2)
	ctx := context.Background()
	insertPending(t, ss[0], 1)
	catalogtest.HoldEntry(t, ss[0], "e0")
	var res catalog.ImportResult
	err := pgtest.Finishes(t, "an import", func() (err error) {
		res, err = ss[1].Import(ctx, bytes.NewReader(file), catalog.ImportParams{Queue: "imported", Actor: "t"})
		return err
	})
	if err != nil || res.Added != 30 {
		t.Fatalf("import = %+v, %v; want 30 added", res, err)
	}
}

// TestPostgresImportsExact: four processes import one file at once: each
// entry and each history record is in the catalog once.
func TestPostgresImportsExact(t *testing.T) {
	file := exportFile(t)
	ss := pgFleet(t, 4)
	ctx := context.Background()
	var mu sync.Mutex
	added := 0
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			res, err := s.Import(ctx, bytes.NewReader(file), catalog.ImportParams{Actor: "t"})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			added += res.Added
			mu.Unlock()
		})
	}
	wg.Wait()
	if entries, distinct := catalogtest.Entries(t, ss[0], "orders"); entries != 30 || distinct != 30 || added != 30 {
		t.Errorf("%d entries (%d distinct), %d added in all; want 30", entries, distinct, added)
	}
	if n := auditOf(t, ss[0], catalog.ActionDiscard); n != 1 {
		t.Errorf("%d discard records imported, want the one of the file", n)
	}
}
