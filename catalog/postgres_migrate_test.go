package catalog_test

import (
	"context"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
)

// An external test: it checks the migrated catalog through package
// ledger, which imports catalog.

// Processes that start at once on a new PostgreSQL catalog migrate it
// once: every opener succeeds and each step is recorded once.
func TestPostgresConcurrentMigrations(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	const openers = 6
	var wg sync.WaitGroup
	stores := make([]*catalog.Store, openers)
	errs := make([]error, openers)
	for i := range openers {
		wg.Go(func() { stores[i], errs[i] = catalog.OpenPostgres(ctx, url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opener %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n, newest int
	if err := stores[0].DB().QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM lily_schema_migrations`).Scan(&n, &newest); err != nil {
		t.Fatal(err)
	}
	if want := catalogdb.PostgresSchemaVersion(); n != want || newest != want { // steps 1..want, each once
		t.Errorf("lily_schema_migrations has %d rows up to version %d, want %d up to %d", n, newest, want, want)
	}
	// Every opener works on the one catalog.
	for i, s := range stores {
		if err := ledger.New(s).AddCounts(ctx, "q", 1, 1); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	rows, err := ledger.New(stores[0]).Rows(ctx, nil)
	if err != nil || len(rows) != 1 || rows[0].Accepted != openers || rows[0].Acked != openers {
		t.Fatalf("ledger %+v, %v; want accepted = acked = %d", rows, err, openers)
	}
}
