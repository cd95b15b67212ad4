package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
)

// TestImportRoundTripBalances (issue 30 item 4): the README's round trip —
// a demo with dead letters (some discarded), 'lily dlq export', 'lily dlq
// import' into a new catalog — leaves 'lily reconcile' balanced on both
// stores: each imported dead-lettered or discarded entry is counted as
// accepted on its queue, in the import's transaction. On the old code
// the new catalog reported them lost with a negative count. Importing the
// file again counts nothing twice.
func TestImportRoundTripBalances(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "lily.db")
	if code, out, errOut := run(t, "demo", "--db", src, "--messages", "60", "--flaky", "2", "--malformed", "3", "--hopeless", "2", "--crashing", "0", "--no-redrive"); code != 0 {
		t.Fatalf("demo: %d %s %s", code, out, errOut)
	}
	mustRun(t, "dlq", "discard", "--db", src, "--dead-letter-reason", "permanent", "--reason", "bad payloads")
	mustRun(t, "reconcile", "--db", src)
	file := filepath.Join(dir, "dump.ndjson")
	mustRun(t, "dlq", "export", "--db", src, "--out", file)
	for _, target := range [][2]string{{"--db", filepath.Join(dir, "copy.db")}, {"--catalog", pgtest.URL(t)}} {
		var res catalog.ImportResult
		out := mustRun(t, "dlq", "import", file, target[0], target[1], "--json")
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Added == 0 || res.Accounted != int64(res.Added) {
			t.Fatalf("import into %s: %v %s", target[0], err, out)
		}
		code, out, errOut := run(t, "reconcile", target[0], target[1], "--json")
		var rec reconcileJSON
		if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || !rec.Balanced {
			t.Fatalf("reconcile after import into %s: exit %d %v\n%s\n%s", target[0], code, err, out, errOut)
		}
		var dead, discarded int64
		for _, q := range rec.Queues {
			dead += q.DeadLettered
			discarded += q.Discarded
		}
		if dead+discarded != int64(res.Added) || discarded == 0 {
			t.Errorf("ledger after import: %d dead-lettered + %d discarded, want the %d imported", dead, discarded, res.Added)
		}
		out = mustRun(t, "dlq", "import", file, target[0], target[1], "--json")
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Added != 0 || res.Accounted != 0 {
			t.Fatalf("second import: %v %s", err, out)
		}
		mustRun(t, "reconcile", target[0], target[1])
	}
}

// TestImportQueuesLinesAndFailures: with --config, entries land only in
// configured queues (--map FROM=TO puts another queue's there); a line
// over the 64 MiB bound is refused without reading it whole; and a bad
// line commits every line before it and none after it (docs/export.md).
func TestImportQueuesLinesAndFailures(t *testing.T) {
	t.Parallel()
	searchCatalogs(t, func(t *testing.T, flag, db string) {
		dir := t.TempDir()
		file := filepath.Join(dir, "dump.ndjson")
		mustRun(t, "dlq", "export", "--out", file, flag, db) // 3 entries of orders, 1 of billing
		cfg := writeConfig(t, "[[queue]]\nname = \"orders\"\n[[queue]]\nname = \"quarantine\"\n")
		target := filepath.Join(dir, "copy.db")
		code, out, errOut := run(t, "dlq", "import", file, "--db", target, "--config", cfg)
		if code != 1 || !strings.Contains(errOut, `queue "billing": not a [[queue]] of the configuration: map it to a configured queue (--map billing=QUEUE`) ||
			!strings.Contains(errOut, "3 entries added") {
			t.Fatalf("import of an unconfigured queue: %d %s %s", code, out, errOut)
		}
		out = mustRun(t, "dlq", "import", file, "--db", target, "--config", cfg, "--map", "billing=quarantine", "--json")
		var res catalog.ImportResult
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Added != 1 || res.Skipped != 3 {
			t.Fatalf("import with --map: %v %s", err, out)
		}
		if code, _, errOut := run(t, "dlq", "import", file, "--db", target, "--map", "billing"); code != 2 || !strings.Contains(errOut, `--map "billing": want FROM=TO`) {
			t.Errorf("bad --map: %d %s", code, errOut)
		}
		// A good line, a bad one, a good one: the first is in, the last not.
		lines := strings.SplitAfter(strings.TrimSpace(string(must(os.ReadFile(file)))), "\n")
		bad := filepath.Join(dir, "bad.ndjson")
		os.WriteFile(bad, []byte(lines[0]+strings.Replace(lines[1], `"state":"pending"`, `"state":"gone"`, 1)+"\n"+lines[2]), 0o600)
		fresh := filepath.Join(dir, "fresh.db")
		code, _, errOut = run(t, "dlq", "import", bad, "--db", fresh)
		if code != 1 || !strings.Contains(errOut, `line 2: state "gone"`) || !strings.Contains(errOut, "1 entries added") {
			t.Fatalf("bad line: %d %s", code, errOut)
		}
		// A line over the bound.
		huge := filepath.Join(dir, "huge.ndjson")
		f, _ := os.Create(huge)
		f.WriteString(lines[0])
		chunk := []byte(strings.Repeat("x", 1<<20))
		for i := 0; i <= catalog.MaxImportLine>>20; i++ {
			f.Write(chunk)
		}
		f.Close()
		code, _, errOut = run(t, "dlq", "import", huge, "--db", filepath.Join(dir, "huge.db"))
		if code != 1 || !strings.Contains(errOut, fmt.Sprintf("line 2: line too long: more than %d bytes", catalog.MaxImportLine)) {
			t.Errorf("huge line: %d %.300s", code, errOut)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestFailedImportLeavesNoDatabase: an import into a SQLite file it would
// create that fails before adding anything removes the file again (it
// used to leave an empty catalog behind); one into an existing file
// leaves that file as it was.
func TestFailedImportLeavesNoDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.ndjson")
	if err := os.WriteFile(bad, []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "new.db")
	if code, _, errOut := run(t, "dlq", "import", bad, "--db", db); code == 0 || !strings.Contains(errOut, "line 1: not an export line") {
		t.Fatalf("import of a bad file: exit %d, %s", code, errOut)
	}
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left behind (%v)", p, err)
		}
	}
	existing := filepath.Join(dir, "existing.db")
	mustRun(t, "demo", "--db", existing, "--messages", "10", "--malformed", "1", "--flaky", "1", "--hopeless", "1", "--crashing", "0", "--json")
	if code, _, _ := run(t, "dlq", "import", bad, "--db", existing); code == 0 {
		t.Fatal("import of a bad file succeeded")
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("the existing catalog is gone: %v", err)
	}
}
