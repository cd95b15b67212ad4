package sqlitedb

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestOpenNewFileConcurrently opens new database files from three
// connections at once, as several processes started together on a new
// catalog do: every open succeeds. (The first connection switches a new
// file to WAL, and SQLite refuses a concurrent switch with SQLITE_BUSY
// without calling the busy handler: about one open in 300 failed with
// "database is locked" before Open tried again within the busy timeout.)
func TestOpenNewFileConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for r := range 300 {
		p := filepath.Join(dir, fmt.Sprintf("new%d.db", r))
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for g := range errs {
			wg.Go(func() {
				db, err := Open(ctx, p, Options{})
				if err != nil {
					errs[g] = err
					return
				}
				defer db.Close()
				_, errs[g] = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS t(x BLOB)`)
			})
		}
		wg.Wait()
		for g, err := range errs {
			if err != nil {
				t.Fatalf("file %d, connection %d: %v", r, g, err)
			}
		}
	}
}
