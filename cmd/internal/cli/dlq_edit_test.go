package cli

import (
	"context"
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

// eachCatalog runs fn on a SQLite catalog seeded by seedDLQ and on a
// PostgreSQL catalog holding the same dead letters (entry IDs 1..6 in
// seedLetters order), with the flag that names the catalog.
func eachCatalog(t *testing.T, fn func(t *testing.T, where []string)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, []string{"--db", seedDLQ(t)})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pg := pgtest.URL(t)
		ctx := context.Background()
		cat, err := catalog.OpenPostgres(ctx, pg)
		if err != nil {
			t.Fatal(err)
		}
		defer cat.Close()
		for i, d := range seedLetters {
			h := transport.Headers{"source-system": "shop-web"}
			for k, v := range d.extra {
				h[k] = v
			}
			evidence.Record{Reason: d.reason, ErrorType: d.errType, ErrorMessage: d.errMsg, Source: "sqlite/" + dlqQueue,
				DeliveryCount: 1, RetryCount: 2, DeadLetteredAt: time.Now(), Consumer: "orders-consumer", ConsumerVersion: "v1", Host: "h"}.Apply(h)
			m := transport.Message{EventID: fmt.Sprintf("evt-%d", i+1), Key: d.key, Type: "order.created", Body: []byte(d.body)}
			if err := cat.Insert(ctx, catalog.NewEntry(dlqQueue, m, h, string(d.reason), time.Now())); err != nil {
				t.Fatal(err)
			}
		}
		fn(t, []string{"--catalog", pg})
	})
}

// editConfig declares orders.created as JSON and three tokens: alice, an
// operator who may edit it; bob, an operator who may not; an admin who
// may not either (a role never allows an edit).
func editConfig(t *testing.T) string {
	return writeConfig(t, `
[[queue]]
name = "orders.created"
transport = "sqlite"
content_type = "application/json"

[[queue]]
name = "payments"
transport = "sqlite"

[[token]]
name = "alice"
role = "operator"
secret = "alice-secret-0123456789"
edit_queues = ["orders.created"]

[[token]]
name = "bob"
role = "operator"
secret = "bob-secret-0123456789"

[[token]]
name = "root"
role = "admin"
secret = "root-secret-0123456789"
edit_queues = ["payments"]
`)
}

func TestDLQEditGuardedVersionsAndDiff(t *testing.T) {
	t.Parallel()
	eachCatalog(t, func(t *testing.T, where []string) {
		cfg := editConfig(t)
		dir := t.TempDir()
		file := func(name, body string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		good := file("good.json", `{"order":1,"total":12.5}`)
		args := func(extra ...string) []string {
			return append(append([]string{"dlq", "edit", "1", "--config", cfg}, where...), extra...)
		}
		// Usage: body file, reason and actor are required.
		if code, _, errOut := run(t, args("--reason", "fix")...); code != 2 || !strings.Contains(errOut, "--body-file") {
			t.Errorf("no body file: %d %s", code, errOut)
		}
		if code, _, errOut := run(t, args("--body-file", good, "--reason", "fix")...); code != 2 || !strings.Contains(errOut, "--actor") {
			t.Errorf("no actor: %d %s", code, errOut)
		}
		// Not editors: an operator without edit_queues, an admin scoped to
		// another queue, a name that is no token.
		for actor, want := range map[string]string{"bob": `may not edit queue orders.created`, "root": "may not edit queue", "mallory": "is not a [[token]]"} {
			code, _, errOut := run(t, args("--body-file", good, "--reason", "fix", "--actor", actor)...)
			if code != 1 || !strings.Contains(errOut, want) {
				t.Errorf("actor %s: exit %d %s", actor, code, errOut)
			}
		}
		// The queue is JSON: a body that does not parse is refused.
		if code, _, errOut := run(t, args("--body-file", file("bad.json", `{"order":1,`), "--reason", "fix", "--actor", "alice")...); code != 1 || !strings.Contains(errOut, "not valid JSON") {
			t.Errorf("bad JSON: %d %s", code, errOut)
		}
		// JSON is UTF-8: a string holding byte 0xff is refused, naming where.
		if code, _, errOut := run(t, args("--body-file", file("latin1.json", "{\"order\":\"caf\xe9\"}"), "--reason", "fix", "--actor", "alice")...); code != 1 ||
			!strings.Contains(errOut, "not valid UTF-8, so not JSON") || !strings.Contains(errOut, "byte 13") {
			t.Errorf("non-UTF-8 JSON: %d %s", code, errOut)
		}
		code, out, errOut := run(t, args("--body-file", good, "--reason", "total was missing", "--actor", "alice", "--json")...)
		if code != 0 {
			t.Fatalf("edit: %d %s", code, errOut)
		}
		var res editJSON
		mustJSON(t, out, &res)
		if res.Version != 1 || res.EditedBy != "alice" || res.Previous.BodySHA256 == res.Current.BodySHA256 ||
			!strings.Contains(res.Diff, "-  \"order\": 1\n+  \"order\": 1,\n+  \"total\": 12.5\n") || !strings.Contains(res.Diff, "@@ -1,3 +1,4 @@\n {\n") {
			t.Fatalf("edit JSON: %+v", res)
		}
		// The human output shows the diff too.
		code, out, errOut = run(t, args("--body-file", file("v2.json", `{"order":1,"total":13}`), "--reason", "rounding", "--actor", "alice")...)
		if code != 0 || !strings.Contains(out, "version 2 stored by alice") || !strings.Contains(out, `-  "total": 12.5`) || !strings.Contains(out, `+  "total": 13`) {
			t.Fatalf("edit 2: %d %s %s", code, out, errOut)
		}
		// show lists every version, as text and JSON.
		code, out, _ = run(t, append([]string{"dlq", "show", "1", "--json"}, where...)...)
		var v entryJSON
		mustJSON(t, out, &v)
		if code != 0 || len(v.Versions) != 3 || v.Versions[2].EditedBy != "alice" || v.Versions[2].Reason != "rounding" ||
			!strings.Contains(v.Versions[2].Diff, `+  "total": 13`) || v.Versions[0].BodySHA256 != v.BodySHA256 {
			t.Fatalf("show JSON versions: %+v", v.Versions)
		}
		code, out, _ = run(t, append([]string{"dlq", "show", "1"}, where...)...)
		if code != 0 || !strings.Contains(out, "versions (3; a redrive sends version 2)") || !strings.Contains(out, "original, as dead-lettered") {
			t.Fatalf("show: %s", out)
		}
		// The refusals and both edits are audited, with both hashes.
		code, out, _ = run(t, append([]string{"audit", "--json"}, where...)...)
		if code != 0 || strings.Count(out, `"action":"refused"`) != 3 || strings.Count(out, `"action":"edit"`) != 2 || !strings.Contains(out, res.Current.BodySHA256) {
			t.Fatalf("audit: %s", out)
		}
		// A discard removes every version's body; show says so.
		if code, _, errOut := run(t, append([]string{"dlq", "discard", "--ids", "1", "--reason", "superseded"}, where...)...); code != 0 {
			t.Fatalf("discard: %s", errOut)
		}
		code, out, _ = run(t, append([]string{"dlq", "show", "1", "--json"}, where...)...)
		mustJSON(t, out, &v)
		for _, ver := range v.Versions {
			if !ver.Erased || ver.Body.Format != "erased" || ver.BodySHA256 == "" {
				t.Errorf("after discard, version %d: %+v", ver.Version, ver)
			}
		}
		// An entry no longer held cannot be edited.
		if code, _, errOut := run(t, args("--body-file", good, "--reason", "again", "--actor", "alice")...); code != 1 || !strings.Contains(errOut, "cannot be edited") {
			t.Errorf("edit after discard: %d %s", code, errOut)
		}
	})
}
