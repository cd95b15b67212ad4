package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/sqlitedb"
)

func TestReconcileBadInput(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.db")
	code, _, errOut := run(t, "reconcile", "--db", missing)
	if code != 2 || !strings.Contains(errOut, "no such database file") {
		t.Errorf("reconcile of a missing file: exit %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "reconcile"); code != 2 || !strings.Contains(errOut, "--db") {
		t.Errorf("reconcile without --db: exit %d %q", code, errOut)
	}
}

func TestReconcileFindsLoss(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "lossy.db")
	if code, out, errOut := run(t, "demo", "--db", db, "--messages", "50", "--flaky", "0", "--malformed", "1", "--hopeless", "0", "--crashing", "0", "--no-redrive"); code != 0 {
		t.Fatalf("demo: %d %s %s", code, out, errOut)
	}
	// Lose a dead letter behind Lily's back: reconcile must notice.
	sqlDB, err := sqlitedb.Open(context.Background(), db, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlDB.Exec(`DELETE FROM lily_dlq_entries`); err != nil {
		t.Fatal(err)
	}
	sqlDB.Close()
	code, out, errOut := run(t, "reconcile", "--db", db, "--json")
	if code != 1 {
		t.Fatalf("reconcile exit %d, want 1: %s %s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Balanced || rec.Queues[0].Lost != 1 {
		t.Errorf("reconcile JSON %s (%v), want balanced false and lost 1", out, err)
	}
	code, out, _ = run(t, "reconcile", "--db", db)
	if code != 1 || !strings.Contains(out, "lost") {
		t.Errorf("human reconcile exit %d:\n%s", code, out)
	}
}
