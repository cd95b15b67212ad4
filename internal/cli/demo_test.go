package cli

import (
	"context"

	"encoding/json"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoJSONCountsEachClass(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	code, out, errOut := run(t, "demo", "--db", db, "--messages", "400", "--malformed", "7", "--flaky", "20", "--hopeless", "4", "--crashing", "2", "--seed", "7", "--json")
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var got demoJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("demo --json output is not one JSON object: %v\n%s", err, out)
	}
	want := map[string]int64{"permanent": 7, "retries_exhausted": 4, "delivery_limit": 2}
	for reason, n := range want {
		if got.DeadLettersByReason[reason] != n {
			t.Errorf("dead letters %s = %d, want %d (the workload class)", reason, got.DeadLettersByReason[reason], n)
		}
	}
	if len(got.DeadLettersByReason) != len(want) {
		t.Errorf("dead letters by reason %v, want only %v", got.DeadLettersByReason, want)
	}
	if got.Accepted != 400 || got.Acked != 400-7-4-2 || got.DeadLettered != 13 || got.Lost != 0 || got.InFlight != 0 || got.Discarded != 0 {
		t.Errorf("ledger %+v, want accepted 400, acked 387, dead-lettered 13, lost 0", got)
	}
	// Each crashing order kills the worker at deliveries 1..delivery_limit.
	if wantRestarts := 2 * demoQueueConfig().DeliveryLimit; got.WorkerRestarts != wantRestarts {
		t.Errorf("worker restarts %d, want %d", got.WorkerRestarts, wantRestarts)
	}
	// The database is left for inspection and reconciles on its own.
	code, out, errOut = run(t, "reconcile", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d: %s %s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 400 {
		t.Errorf("reconcile after the demo: %v %s", err, out)
	}
}

func TestDemoHumanOutput(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "demo", "--db", filepath.Join(t.TempDir(), "d.db"), "--messages", "100", "--flaky", "5", "--malformed", "2", "--hopeless", "1", "--crashing", "1")
	if code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"orders.created", "dead letters by reason", "delivery_limit", "reconcile: OK", "lost 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoBadInput(t *testing.T) {
	t.Parallel()
	existing := filepath.Join(t.TempDir(), "exists.db")
	if code, _, _ := run(t, "demo", "--db", existing, "--messages", "1", "--flaky", "0", "--malformed", "0", "--hopeless", "0", "--crashing", "0"); code != 0 {
		t.Fatalf("setup demo failed: %d", code)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--messages", "-1"}, "--messages -1"},
		{[]string{"demo", "--messages", "10", "--flaky", "20"}, "must be <= --messages (10)"},
		{[]string{"demo", "--crashing", "3", "--max-restarts", "2"}, "--max-restarts 2"},
		{[]string{"demo", "--messages", "ten"}, "invalid argument"},
		{[]string{"demo", "--db", existing}, "the file exists"},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d stderr %q, want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
}

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
	if code, out, errOut := run(t, "demo", "--db", db, "--messages", "50", "--flaky", "0", "--malformed", "1", "--hopeless", "0", "--crashing", "0"); code != 0 {
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
