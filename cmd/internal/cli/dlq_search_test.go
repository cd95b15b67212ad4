package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// searchCatalogs runs fn on a seeded SQLite file and a seeded PostgreSQL
// catalog; flag is "--db" or "--catalog" and where its value.
func searchCatalogs(t *testing.T, fn func(t *testing.T, flag, where string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			flag, where := "--db", filepath.Join(t.TempDir(), "lily.db")
			if kind == "postgres" {
				flag, where = "--catalog", pgtest.URL(t)
			}
			seedSearch(t, where)
			fn(t, flag, where)
		})
	}
}

func seedSearch(t *testing.T, where string) {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.Open(ctx, where)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	mk := func(queue, id, msg, body string) *catalog.Entry {
		h := transport.Headers{"x-count": uint32(7), "price": transport.Decimal{Scale: 2, Value: 999}}
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: msg, Source: queue,
			DeadLetteredAt: time.Now()}.Apply(h)
		return catalog.NewEntry(queue, transport.Message{EventID: id, Body: []byte(body)}, h, "", time.Now().Add(-time.Hour))
	}
	if err := cat.Insert(ctx,
		mk("orders", "o-1", "payment gateway timeout", `{"customer":{"id":"42"},"token":"abc123secret"}`),
		mk("orders", "o-2", "payment declined", `{"customer":{"id":"43"}}`),
		mk("orders", "o-3", "schema mismatch", `{"customer":{"id":"42"},"total":10}`),
		mk("billing", "b-1", "gateway timeout", `plain text body`),
	); err != nil {
		t.Fatal(err)
	}
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("lily %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestDLQSearchCommand(t *testing.T) {
	t.Parallel()
	searchCatalogs(t, func(t *testing.T, flag, where string) {
		var res struct {
			Entries []struct {
				EventID string                `json:"event_id"`
				Snippet []catalog.SnippetPart `json:"snippet"`
			} `json:"entries"`
			Next int64 `json:"next_after_id"`
		}
		out := mustRun(t, "dlq", "search", "gateway timeout", flag, where, "--json")
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Entries) != 2 || res.Entries[0].EventID != "o-1" || res.Entries[1].EventID != "b-1" {
			t.Fatalf("search JSON: %v\n%s", err, out)
		}
		out = mustRun(t, "dlq", "search", "gateway", "--queue", "billing", flag, where)
		if !strings.Contains(out, "billing") || strings.Contains(out, "orders") || !strings.Contains(out, "**gateway**") {
			t.Fatalf("search --queue:\n%s", out)
		}
		// Redacted before indexing: the token's value is not searchable.
		if out := mustRun(t, "dlq", "search", "abc123secret", flag, where); !strings.Contains(out, "no entries match") {
			t.Fatalf("a secret was searchable:\n%s", out)
		}
		out = mustRun(t, "dlq", "search", "customer", "--where", `.customer.id == "42"`, "--limit", "1", flag, where, "--json")
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Entries) != 1 || res.Entries[0].EventID != "o-1" || res.Next == 0 {
			t.Fatalf("search --where --limit 1: %v\n%s", err, out)
		}
		out = mustRun(t, "dlq", "search", "customer", "--where", `.customer.id == "42"`, "--after-id", "1", flag, where, "--json")
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Entries) != 1 || res.Entries[0].EventID != "o-3" {
			t.Fatalf("search --after-id: %v\n%s", err, out)
		}
		code, _, errOut := run(t, "dlq", "search", "...", flag, where)
		if code != 2 || !strings.Contains(errOut, "nothing to search for") {
			t.Fatalf("empty search: %d %s", code, errOut)
		}
	})
}

func TestDLQWhereFlag(t *testing.T) {
	t.Parallel()
	searchCatalogs(t, func(t *testing.T, flag, where string) {
		out := mustRun(t, "dlq", "list", "--where", `.customer.id == "42"`, flag, where, "--json")
		var lst struct {
			Queues []listWhereRow `json:"queues"`
		}
		if err := json.Unmarshal([]byte(out), &lst); err != nil || len(lst.Queues) != 1 || lst.Queues[0].Queue != "orders" || lst.Queues[0].Matching != 2 {
			t.Fatalf("list --where: %v\n%s", err, out)
		}
		out = mustRun(t, "dlq", "group", "--by", "fingerprint", "--where", `.customer.id == "42" and .total > 5`, flag, where, "--json")
		if !strings.Contains(out, "schema mismatch") || strings.Contains(out, "payment") {
			t.Fatalf("group --where:\n%s", out)
		}
		out = mustRun(t, "dlq", "peek", "--queue", "orders", "--where", `.customer.id != "42"`, flag, where, "--json")
		if !strings.Contains(out, `"o-2"`) || strings.Contains(out, `"o-1"`) {
			t.Fatalf("peek --where:\n%s", out)
		}
		// Redrive selects by --where too (the queue is not declared here, so
		// the redrive is refused after the selection, with nothing sent).
		code, _, errOut := run(t, "dlq", "redrive", "--queue", "orders", "--where", `.customer.id == "42"`, "--dry-run", flag, where)
		if code == 0 || !strings.Contains(errOut, "(2 pending entries selected there)") || !strings.Contains(errOut, "nothing was sent or changed") {
			t.Fatalf("redrive --where: %d %s", code, errOut)
		}
		out = mustRun(t, "dlq", "discard", "--reason", "test", "--where", `.customer.id == "43"`, flag, where, "--json")
		if !strings.Contains(out, `"count": 1`) {
			t.Fatalf("discard --where:\n%s", out)
		}
		// The audit selector records the expression.
		out = mustRun(t, "audit", flag, where, "--json")
		if !strings.Contains(out, `\"where\":\".customer.id == \\\"43\\\"\"`) {
			t.Fatalf("audit selector lacks the where expression:\n%s", out)
		}
		code, _, errOut = run(t, "dlq", "group", "--by", "reason", "--where", `.customer.id = "42"`, flag, where)
		if code != 2 || !strings.Contains(errOut, `--where ".customer.id = \"42\"": column 14: "=" is not an operator`) {
			t.Fatalf("bad --where: %d %s", code, errOut)
		}
	})
}

func TestDLQExportImportCommands(t *testing.T) {
	t.Parallel()
	searchCatalogs(t, func(t *testing.T, flag, where string) {
		dir := t.TempDir()
		file := filepath.Join(dir, "dump.ndjson")
		out := mustRun(t, "dlq", "export", "--out", file, flag, where, "--json")
		if !strings.Contains(out, `"entries": 4`) {
			t.Fatalf("export: %s", out)
		}
		// Into an empty SQLite file and an empty PostgreSQL catalog.
		for _, target := range [][2]string{{"--db", filepath.Join(dir, "copy.db")}, {"--catalog", pgtest.URL(t)}} {
			out = mustRun(t, "dlq", "import", file, target[0], target[1], "--actor", "migrator", "--json")
			var res catalog.ImportResult
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.Added != 4 || res.Skipped != 0 {
				t.Fatalf("import into %s: %v %s", target[0], err, out)
			}
			again := filepath.Join(dir, "again.ndjson")
			mustRun(t, "dlq", "export", "--out", again, target[0], target[1])
			a, _ := os.ReadFile(file)
			b, _ := os.ReadFile(again)
			if !bytes.Equal(stripVolatile(t, a), stripVolatile(t, b)) {
				t.Fatalf("re-export differs:\n%s\n%s", a, b)
			}
			out = mustRun(t, "dlq", "import", file, target[0], target[1])
			if !strings.Contains(out, "0 entries added, 4 duplicates skipped") {
				t.Fatalf("second import: %s", out)
			}
		}
		// --queue moves the entries; a filtered export holds only matches.
		part := filepath.Join(dir, "part.ndjson")
		mustRun(t, "dlq", "export", "--out", part, "--where", `.customer.id == "42"`, flag, where)
		other := filepath.Join(dir, "other.db")
		mustRun(t, "dlq", "import", part, "--queue", "quarantine", "--db", other)
		out = mustRun(t, "dlq", "list", "--db", other, "--json")
		if !strings.Contains(out, `"quarantine"`) || strings.Contains(out, `"orders"`) || !strings.Contains(out, `"depth": 2`) {
			t.Fatalf("list after import --queue:\n%s", out)
		}
		code, _, errOut := run(t, "dlq", "import", filepath.Join(dir, "missing.ndjson"), "--db", other)
		if code != 2 || !strings.Contains(errOut, "no such file") {
			t.Fatalf("import of a missing file: %d %s", code, errOut)
		}
		code, _, errOut = run(t, "dlq", "export", flag, where)
		if code != 2 || !strings.Contains(errOut, "--out FILE is required") {
			t.Fatalf("export without --out: %d %s", code, errOut)
		}
	})
}

// stripVolatile drops the catalog IDs and the history (audit IDs, and the
// export and import records) of an export, keeping the rest byte for byte.
func stripVolatile(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "id")
		delete(m, "history")
		enc, _ := json.Marshal(m)
		out.Write(enc)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// The config's redact_patterns apply to what import indexes: the raw body
// keeps the reference, the index holds it masked.
func TestDLQImportIndexesWithConfigRedaction(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	seedSearch(t, src)
	ctx := context.Background()
	cat, err := catalog.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	h := transport.Headers{}
	evidence.Record{Reason: evidence.ReasonPermanent, ErrorMessage: "bad ref", DeadLetteredAt: time.Now()}.Apply(h)
	if err := cat.Insert(ctx, catalog.NewEntry("orders", transport.Message{EventID: "r-1", Body: []byte(`{"ref":"ORD-777123"}`)}, h, "", time.Now())); err != nil {
		t.Fatal(err)
	}
	cat.Close()
	file := filepath.Join(dir, "dump.ndjson")
	mustRun(t, "dlq", "export", "--out", file, "--db", src)
	dst := filepath.Join(dir, "dst.db")
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nredact_patterns = [\"ORD-[0-9]+\"]\n", dst))
	t.Cleanup(func() { catalog.SetIndexRedactor(nil) })
	mustRun(t, "dlq", "import", file, "--config", cfg)
	if out := mustRun(t, "dlq", "search", "777123", "--db", dst); !strings.Contains(out, "no entries match") {
		t.Fatalf("a redact_patterns match was indexed:\n%s", out)
	}
	if out := mustRun(t, "dlq", "search", "ref", "--db", dst, "--json"); !strings.Contains(out, `"r-1"`) || strings.Contains(out, "777123") {
		t.Fatalf("search ref:\n%s", out)
	}
	out := mustRun(t, "dlq", "show", "5", "--db", dst, "--json")
	if !strings.Contains(out, "ORD-777123") {
		t.Fatalf("the raw body lost its reference:\n%s", out)
	}
}
