package catalogdb

import (
	"context"
	"database/sql"
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

// MigrateOnce migrates a handle once: a second call on it reads nothing
// (a table dropped behind its back stays dropped), a new handle on the
// same file is migrated again.
func TestMigrateOncePerHandle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "once.db")
	open := func() *sql.DB {
		db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	tables := func(db *sql.DB) int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'lily_dlq_entries'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	db := open()
	if err := MigrateOnce(ctx, db); err != nil {
		t.Fatalf("MigrateOnce: %v", err)
	}
	if tables(db) != 1 {
		t.Fatal("MigrateOnce made no entries table")
	}
	if _, err := db.ExecContext(ctx, `DROP TABLE lily_dlq_entries`); err != nil {
		t.Fatal(err)
	}
	if err := MigrateOnce(ctx, db); err != nil {
		t.Fatalf("second MigrateOnce: %v", err)
	}
	if tables(db) != 0 {
		t.Error("the second MigrateOnce on the same handle migrated again")
	}
	other := open()
	if err := MigrateOnce(ctx, other); err != nil {
		t.Fatalf("MigrateOnce on a new handle: %v", err)
	}
	if tables(other) != 1 {
		t.Error("MigrateOnce on a new handle did not migrate")
	}
}
