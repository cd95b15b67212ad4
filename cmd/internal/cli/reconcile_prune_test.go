package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport/sqlite"
)

// TestReconcilePrune: 'lily reconcile --prune' folds the per-event rows
// older than the horizon (default 720 h) and prints the same ledger, with
// the memory it keeps.
func TestReconcilePrune(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-721 * time.Hour).UnixMilli()
	recent := time.Now().Add(-time.Hour).UnixMilli()
	// Three messages of a broker queue, accepted and acked: two long ago.
	if _, err := tr.DB().ExecContext(ctx, `INSERT INTO lily_ledger(queue, accepted, acked) VALUES ('orders', 3, 3)`); err != nil {
		t.Fatal(err)
	}
	for id, at := range map[string]int64{"a": old, "b": old, "c": recent} {
		if _, err := tr.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ('orders', 'accepted', ?, ?), ('orders', 'acked', ?, ?)`,
			id, at, id, at); err != nil {
			t.Fatal(err)
		}
	}
	tr.Close()
	code, out, errOut := run(t, "reconcile", "--db", db, "--prune", "--json")
	if code != 0 {
		t.Fatalf("reconcile --prune: %d %s %s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 3 || rec.Queues[0].Acked != 3 {
		t.Errorf("ledger %+v, want orders balanced with 3 accepted and acked", rec.Queues)
	}
	if e := rec.LedgerEvents; e.PrunedNow != 4 || e.Pruned != 4 || e.Kept != 2 || e.HorizonHours != 720 {
		t.Errorf("ledger_events %+v, want 4 pruned now, 2 kept, horizon 720", e)
	}
	code, out, _ = run(t, "reconcile", "--db", db, "--prune")
	if code != 0 || !strings.Contains(out, "pruned 0 ledger event rows") || !strings.Contains(out, "2 per-event rows kept (horizon 720 h), 4 folded") {
		t.Errorf("second reconcile --prune: %d\n%s", code, out)
	}
}
