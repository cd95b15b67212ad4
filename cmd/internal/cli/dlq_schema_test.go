package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// seedSchemaDLQ publishes, with lily.Publish, messages of schema versions
// 3, 3, 4 and none to orders.created and dead-letters them all.
func seedSchemaDLQ(t *testing.T) string {
	t.Helper()
	db, tr := newSeedStore(t)
	defer tr.Close()
	msgs := []lily.Message{
		{EventID: "s3a", Body: []byte("a"), SchemaVersion: 3}, {EventID: "s3b", Body: []byte("b"), SchemaVersion: 3},
		{EventID: "s4", Body: []byte("c"), SchemaVersion: 4}, {EventID: "none", Body: []byte("d")},
	}
	if err := lily.Publish(context.Background(), tr, dlqQueue, msgs); err != nil {
		t.Fatal(err)
	}
	deadLetterAll(t, tr, len(msgs), func(_ int, h transport.Headers) evidence.Reason {
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*json.SyntaxError", ErrorMessage: "bad", Source: "sqlite/" + dlqQueue,
			DeliveryCount: 1, DeadLetteredAt: time.Now(), Consumer: "c", ConsumerVersion: "v1", Host: "h"}.Apply(h)
		return evidence.ReasonPermanent
	})
	return db
}

// TestDLQSchemaVersion: list, group and redrive filter and group by the
// schema version; a redrive of versions the queue's consumers do not read
// (schema_versions) is refused without --force and warned about in the dry
// run; without schema_versions it warns about versions older than the
// newest seen.
func TestDLQSchemaVersion(t *testing.T) {
	t.Parallel()
	db := seedSchemaDLQ(t)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\nschema_versions = [4]\n", db, dlqQueue))

	queues := listJSON(t, cfg)
	if len(queues) != 1 || fmt.Sprint(queues[0].SchemaVersions) != "map[3:2 4:1 none:1]" || queues[0].Depth != 4 {
		t.Errorf("list %+v", queues)
	}
	if code, out, _ := run(t, "dlq", "list", "--db", db); code != 0 || !strings.Contains(out, "v3:2 v4:1 none:1") {
		t.Errorf("human list: %d\n%s", code, out)
	}

	code, out, _ := run(t, "dlq", "group", "--by", "schema_version", "--db", db, "--json")
	var g dlqGroupJSON
	mustJSON(t, out, &g)
	if code != 0 || len(g.Groups) != 3 || g.Groups[0].Key != "3" || g.Groups[0].Count != 2 || g.Total != 4 {
		t.Errorf("group by schema_version: %d %+v", code, g)
	}
	if code, out, _ := run(t, "dlq", "group", "--by", "schema_version", "--db", db); code != 0 || !strings.Contains(out, "(none)") {
		t.Errorf("human group: %d\n%s", code, out)
	}
	code, out, _ = run(t, "dlq", "group", "--by", "reason", "--schema-version", "3", "--db", db, "--json")
	mustJSON(t, out, &g)
	if code != 0 || g.Total != 2 {
		t.Errorf("group --schema-version 3: %d %+v", code, g)
	}
	if code, _, errOut := run(t, "dlq", "group", "--by", "reason", "--schema-version", "x", "--db", db); code != 2 ||
		!strings.Contains(errOut, `--schema-version "x": want a schema version >= 1`) {
		t.Errorf("bad --schema-version: %d %s", code, errOut)
	}

	// Dry run: the warning, nothing changed.
	code, out, _ = run(t, "dlq", "redrive", "--config", cfg, "--dry-run")
	if code != 0 || !strings.Contains(out, "warning: orders.created: the selection holds entries of schema version(s) v3:2") ||
		!strings.Contains(out, "schema_versions = [4]: refused without --force") {
		t.Errorf("dry run: %d\n%s", code, out)
	}
	// The real run is refused: nothing sent.
	code, out, errOut := run(t, "dlq", "redrive", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, "redrive refused") || !strings.Contains(out, "v3:2") {
		t.Errorf("redrive of schema 3 into a schema-4 consumer: exit %d\n%s\n%s", code, out, errOut)
	}
	if st := entryStates(t, db); st["pending"] != 4 {
		t.Fatalf("states after the refusal: %v", st)
	}
	// Narrowed to what the consumer reads (and entries without a version): no warning.
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--schema-version", "4", "--json")
	var res redriveJSON
	mustJSON(t, out, &res)
	if code != 0 || res.Redriven != 1 || len(res.SchemaWarnings) != 0 {
		t.Errorf("redrive --schema-version 4: %d %+v %s", code, res, errOut)
	}
	// --force sends the rest, still warning.
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--force", "--json")
	mustJSON(t, out, &res)
	if code != 0 || res.Redriven != 3 || len(res.SchemaWarnings) != 1 || !strings.Contains(errOut, "sent anyway (--force)") {
		t.Errorf("redrive --force: %d %+v %s", code, res, errOut)
	}
	if st := entryStates(t, db); st["redriven"] != 4 {
		t.Errorf("states after the redrives: %v", st)
	}
	// Conservation: the 4 redriven messages are back in the queue.
	if code, out, _ := run(t, "reconcile", "--db", db, "--json"); code != 0 || !strings.Contains(out, `"in_flight": 4`) {
		t.Errorf("reconcile after the redrive: %d %s", code, out)
	}

	// Without schema_versions: a warning for versions older than the newest seen, no refusal.
	db2 := seedSchemaDLQ(t)
	code, out, errOut = run(t, "dlq", "redrive", "--db", db2)
	if code != 0 || !strings.Contains(out, "older than the newest version among the queue's dead letters (4)") ||
		!strings.Contains(out, "redriven 4") {
		t.Errorf("undeclared schema_versions: %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := run(t, "reconcile", "--db", db2); code != 0 {
		t.Errorf("reconcile: %d %s", code, out)
	}
}
