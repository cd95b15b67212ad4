package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

// oldForeignTrigger is the trigger as databases made before the group
// commit have it: one upsert into the ledger.
const oldForeignTrigger = `CREATE TRIGGER lily_messages_foreign AFTER INSERT ON lily_messages
WHEN NEW.accounted = 0
BEGIN
	INSERT INTO lily_ledger(queue, accepted, acked) VALUES (NEW.queue, 1, 0)
		ON CONFLICT(queue) DO UPDATE SET accepted = accepted + 1;
	UPDATE lily_messages SET accounted = 1,
		event_id = CASE WHEN NEW.event_id = '' THEN 'sqlite-' || NEW.id || '-' || NEW.enqueued_at ELSE NEW.event_id END
		WHERE id = NEW.id;
END`

// Open replaces the foreign-producer trigger of an older database with the
// current one, once, and the new one counts a row inserted with plain SQL
// (into a queue with and without a ledger row) exactly once.
func TestOpenReplacesTheForeignTrigger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lily.db")
	reopen := func() *Transport {
		t.Helper()
		tr, err := Open(ctx, path, Options{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return tr
	}
	tr := reopen()
	for _, q := range []string{`DROP TRIGGER lily_messages_foreign`, oldForeignTrigger} {
		if _, err := tr.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	tr.Close()

	trigger := func(tr *Transport) (sql string, version int) {
		t.Helper()
		if err := tr.DB().QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'lily_messages_foreign'`).Scan(&sql); err != nil {
			t.Fatal(err)
		}
		if err := tr.DB().QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&version); err != nil {
			t.Fatal(err)
		}
		return sql, version
	}
	tr = reopen()
	got, version := trigger(tr)
	if got != foreignTrigger {
		t.Errorf("trigger after Open:\n%s\nwant:\n%s", got, foreignTrigger)
	}
	tr.Close()
	tr = reopen()
	t.Cleanup(func() { tr.Close() })
	if _, again := trigger(tr); again != version {
		t.Errorf("schema_version %d → %d: Open replaced a current trigger", version, again)
	}

	for _, q := range []string{"fresh", "fresh", "other"} {
		if _, err := tr.DB().ExecContext(ctx, `INSERT INTO lily_messages(queue, event_id, body, visible_at, enqueued_at) VALUES (?, '', x'00', 0, 0)`, q); err != nil {
			t.Fatalf("raw insert: %v", err)
		}
	}
	l := ledgerOf(t, tr)
	if l["fresh"].Accepted != 2 || l["other"].Accepted != 1 {
		t.Errorf("ledger = %+v, want fresh accepted 2, other 1", l)
	}
	var unaccounted int
	if err := tr.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_messages WHERE accounted = 0 OR event_id = ''`).Scan(&unaccounted); err != nil {
		t.Fatal(err)
	}
	if unaccounted != 0 {
		t.Errorf("%d raw rows left unaccounted or without an event ID", unaccounted)
	}
}
