package catalogdb

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/transport"
)

// TestSchemaVersionMigration: a catalog file made before the column
// existed gets it, filled for its old entries, and migrating again is a
// no-op.
func TestSchemaVersionMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The tables as an older Lily made them: no schema_version column.
	if _, err := db.ExecContext(ctx, schema); err != nil {
		t.Fatal(err)
	}
	hdr, err := transport.MarshalHeaders(transport.Headers{evidence.HeaderSchemaVersion: int32(7)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO lily_dlq_entries (queue, event_id, body_sha256, reason, headers, dead_lettered_at, updated_at)
		VALUES ('q', 'old', 'x', 'permanent', ?, 1, 1)`, hdr); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Migrate(ctx, db); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	var v int
	if err := db.QueryRowContext(ctx, `SELECT schema_version FROM lily_dlq_entries WHERE event_id = 'old'`).Scan(&v); err != nil || v != 7 {
		t.Errorf("old entry schema_version %d (%v), want 7", v, err)
	}
}
