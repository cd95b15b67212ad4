package catalogdb

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"weak"
)

// Migrate creates the catalog tables in db, a SQLite database, if they do
// not exist — every table of every package layered on the catalog — and
// adds the columns and indexes a database file made by an older Lily
// lacks. It is idempotent, and safe to run from several processes at once.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("catalog: create schema: %w", err)
	}
	have := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info('lily_dlq_entries')`)
	if err != nil {
		return fmt.Errorf("catalog: inspect schema: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		have[n] = true
	}
	rows.Close()
	for _, c := range addedColumns {
		if have[c.name] {
			continue
		}
		// Another process may add it at the same time: a duplicate is fine.
		if _, err := db.ExecContext(ctx, `ALTER TABLE lily_dlq_entries ADD COLUMN `+c.name+` `+c.decl); err != nil &&
			!strings.Contains(err.Error(), "duplicate column") {
			return fmt.Errorf("catalog: add column %s: %w", c.name, err)
		}
	}
	if _, err := db.ExecContext(ctx, indexes+auditSchema+keySchema+leaseSchema+jobsSchema+ledgerPruneSchema+triageSchema+searchSchema+editSchema+ruleSchema+foreignSchema+presenceSchema); err != nil {
		return fmt.Errorf("catalog: create indexes: %w", err)
	}
	if err := migrateRedirect(ctx, db); err != nil {
		return err
	}
	if err := migrateSchemaVersion(ctx, db); err != nil {
		return err
	}
	return BackfillSearch(ctx, New(db, SQLite))
}

// migrated holds the handles MigrateOnce has migrated in this process,
// as weak pointers: an entry goes when its handle is collected.
var migrated sync.Map // weak.Pointer[sql.DB] → struct{}

// MigrateOnce is Migrate, once per handle in a process: the SQLite
// transport migrates the catalog in its file at Open, and a catalog.New
// over the transport's handle then needs no second pass over the whole
// schema (parsing it was a tenth of a CLI command's CPU).
func MigrateOnce(ctx context.Context, db *sql.DB) error {
	key := weak.Make(db)
	if _, ok := migrated.Load(key); ok {
		return nil
	}
	if err := Migrate(ctx, db); err != nil {
		return err
	}
	if _, loaded := migrated.LoadOrStore(key, struct{}{}); !loaded {
		runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { migrated.Delete(k) }, key)
	}
	return nil
}

// addedColumns are the entry columns added after the first release of the
// table: Migrate adds them to an older database file.
var addedColumns = []struct{ name, decl string }{
	{"decided_at", "INTEGER"},
	{"decided_by", "TEXT NOT NULL DEFAULT ''"},
	{"decision", "TEXT NOT NULL DEFAULT ''"},
	{"erased_at", "INTEGER"},
	{"hold_key", "TEXT NOT NULL DEFAULT ''"},
	// Dedup by the same dead-lettering (event ID, body, source and its
	// coordinates), not by the event ID alone: entries of an older file
	// get '' (no coordinates), which only ever keeps more entries apart.
	{"source_coords", "TEXT NOT NULL DEFAULT ''"},
	// Discard and expire remove the data and keep its sizes.
	{"body_size", "INTEGER"},
	{"headers_size", "INTEGER"},
	// A redrive --to another queue records the queue it went to: the
	// ledger counts the entry as redirected out of its source.
	{"redirected_to", "TEXT NOT NULL DEFAULT ''"},
}

// migrateRedirect adds the redirect target column of redrive jobs to a
// SQLite file made by an older Lily.
func migrateRedirect(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('lily_redrive_jobs') WHERE name = 'to_queue'`).Scan(&n); err != nil {
		return fmt.Errorf("catalog: inspect redrive jobs: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE lily_redrive_jobs ADD COLUMN to_queue TEXT NOT NULL DEFAULT ''`); err != nil &&
		!strings.Contains(err.Error(), "duplicate column") {
		return fmt.Errorf("catalog: add column to_queue: %w", err)
	}
	return nil
}

// migrateSchemaVersion adds the schema_version column and its index to a
// database that lacks them (a self-contained migration step).
func migrateSchemaVersion(ctx context.Context, db *sql.DB) error {
	var n int
	// table_xinfo (not table_info) lists generated columns.
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_xinfo('lily_dlq_entries') WHERE name = 'schema_version'`).Scan(&n); err != nil {
		return fmt.Errorf("catalog: inspect schema: %w", err)
	}
	if n == 0 {
		_, err := db.ExecContext(ctx, `ALTER TABLE lily_dlq_entries ADD COLUMN schema_version INTEGER GENERATED ALWAYS AS (`+schemaVersionExpr+`) VIRTUAL`)
		// Another process may add it at the same time: a duplicate is fine.
		if err != nil && !strings.Contains(err.Error(), "duplicate column") {
			return fmt.Errorf("catalog: add column schema_version: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, schemaVersionIndex); err != nil {
		return fmt.Errorf("catalog: create schema_version index: %w", err)
	}
	return nil
}

// schemaVersionValue is the JSON path of the header's typed value.
const schemaVersionValue = `json_extract(CAST(headers AS TEXT), '$."x-lily-schema-version".%s')`

// schemaVersionExpr is the column's expression.
var schemaVersionExpr = func() string {
	v := func(code string) string { return fmt.Sprintf(schemaVersionValue, code) }
	s := v("s")
	text := `CASE WHEN typeof(` + s + `) = 'text' AND ` + s + ` <> '' AND length(` + s + `) <= 10 AND ` + s +
		` NOT GLOB '*[^0-9]*' THEN CAST(` + s + ` AS INTEGER) END`
	n := `COALESCE(` + v("i32") + `, ` + v("i64") + `, ` + v("i16") + `, ` + v("i8") + `, ` +
		v("u8") + `, ` + v("u16") + `, ` + v("u32") + `, ` + text + `)`
	return `CASE WHEN json_valid(CAST(headers AS TEXT)) THEN (CASE WHEN ` + n + ` BETWEEN 1 AND 2147483647 THEN ` + n + ` END) END`
}()

// schemaVersionIndex serves grouping and filtering held entries by it.
const schemaVersionIndex = `CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_schema_version ON lily_dlq_entries(schema_version, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');`
