package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// IsPostgresURL reports whether s names a PostgreSQL catalog
// ("postgres://…" or "postgresql://…") rather than a SQLite file.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// OpenPostgres opens the catalog in the PostgreSQL database at url
// (a libpq URL: postgres://user@host:5432/db?sslmode=disable, with any
// run-time parameter such as search_path=lily as a query parameter) and
// applies the migrations it lacks. Consumers on many hosts and several
// 'lily serve' replicas can share one such catalog.
func OpenPostgres(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("catalog: open %s: %w", redactURL(url), err)
	}
	// A fleet shares the server: a modest pool per process. Catalog
	// transactions run one at a time anyway (handle.BeginTx); the rest
	// are reads.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: connect to %s: %w (is PostgreSQL running and the URL right? e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", redactURL(url), err)
	}
	h := &handle{DB: db, d: dialectPostgres}
	if err := migratePostgres(ctx, h); err != nil {
		db.Close()
		return nil, err
	}
	if err := backfillSearch(ctx, h); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: h, owned: true}, nil
}

// redactURL hides a password in a connection URL for error messages.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "<invalid URL>"
}

// pgMigration is one versioned step of the PostgreSQL schema. Steps are
// applied in order, each in its own transaction with its version row, so
// a step is either wholly there or not at all; the table
// lily_schema_migrations lists what was applied.
type pgMigration struct {
	version int
	name    string
	sql     func() string
}

// pgMigrations is the PostgreSQL schema's history. Append only: a step,
// once released, never changes (step 1 is the schema of the first release
// with a PostgreSQL store).
var pgMigrations = []pgMigration{
	{1, "catalog tables, indexes, append-only audit", func() string {
		return pgSchemaVersionFunc + pgDDL(schema) + pgDDL(indexes) + pgDDL(auditTable) + pgAuditTriggers + pgDDL(keySchema) + pgDDL(leaseSchema) + pgDDL(jobsSchema) + pgDDL(ledgerPruneSchema) +
			`ALTER TABLE lily_dlq_entries ADD COLUMN schema_version INTEGER GENERATED ALWAYS AS (lily_schema_version(headers)) STORED;` +
			schemaVersionIndex
	}},
	{2, "covering indexes for group (INCLUDE id), schema_version kept by a trigger", func() string {
		return pgGroupIndexes + pgSchemaVersionTrigger
	}},
	{3, "triage of entries and groups, append-only notes; redirected_to", func() string {
		return pgDDL(triageTables) + pgTriage + `ALTER TABLE lily_dlq_entries ADD COLUMN redirected_to TEXT NOT NULL DEFAULT '';` + pgRedirectJobs
	}},
	{4, "search index (redacted text, tsvector + GIN), its backfill marker, JSON functions for --where", func() string {
		return pgSearchSchema
	}},
	{5, "edited body versions, breaker transitions, consumer versions, redrive rule firings", func() string {
		return pgDDL(editSchema) + pgDDL(ruleSchema)
	}},
	{6, "foreign dead-letter queues (lily consume / [[foreign_dlq]])", func() string { return pgDDL(foreignSchema) }},
}

// migratePostgres applies the steps of pgMigrations the database lacks.
// Processes that start at once wait for each other on a session advisory
// lock ("lily:migrate"),
// so every step runs exactly once.
func migratePostgres(ctx context.Context, h *handle) error {
	conn, err := h.DB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("catalog: migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(hashtext($1 || current_schema()))`, pgLockPrefix+"migrate"); err != nil {
		return fmt.Errorf("catalog: migrate: take the migration lock: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1 || current_schema()))`, pgLockPrefix+"migrate")
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS lily_schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at BIGINT  NOT NULL)`); err != nil {
		return fmt.Errorf("catalog: migrate: %w", err)
	}
	var have int
	if err := conn.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM lily_schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("catalog: migrate: read the applied version: %w", err)
	}
	if newest := pgMigrations[len(pgMigrations)-1].version; have > newest {
		return fmt.Errorf("catalog: the PostgreSQL catalog is at schema version %d, newer than this Lily knows (%d): upgrade Lily", have, newest)
	}
	for _, m := range pgMigrations {
		if m.version <= have {
			continue
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("catalog: migrate: %w", err)
		}
		if _, err := tx.ExecContext(ctx, m.sql()); err != nil {
			tx.Rollback()
			return fmt.Errorf("catalog: migrate to version %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_schema_migrations(version, name, applied_at) VALUES ($1, $2, $3)`,
			m.version, m.name, time.Now().UnixMilli()); err != nil {
			tx.Rollback()
			return fmt.Errorf("catalog: migrate to version %d: %w", m.version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("catalog: migrate to version %d: %w", m.version, err)
		}
	}
	return nil
}

var (
	ddlAutoID    = regexp.MustCompile(`\bINTEGER\s+PRIMARY\s+KEY\b`)
	ddlInteger   = regexp.MustCompile(`\bINTEGER\b`)
	ddlBlob      = regexp.MustCompile(`\bBLOB\b`)
	ddlNoRowID   = regexp.MustCompile(`\)\s*WITHOUT\s+ROWID\s*;`)
	ddlSQLiteTrg = regexp.MustCompile(`(?s)CREATE TRIGGER.*?END;`)
)

// pgDDL translates the catalog's SQLite table definitions, written in the
// subset both stores share, to PostgreSQL: 64-bit integers (times are Unix
// milliseconds), BYTEA for BLOB, identity columns for INTEGER PRIMARY KEY,
// no WITHOUT ROWID. SQLite triggers are dropped (PostgreSQL gets its own).
func pgDDL(s string) string {
	s = ddlSQLiteTrg.ReplaceAllString(s, "")
	s = ddlAutoID.ReplaceAllString(s, "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
	s = ddlInteger.ReplaceAllString(s, "BIGINT")
	s = ddlBlob.ReplaceAllString(s, "BYTEA")
	return ddlNoRowID.ReplaceAllString(s, ");")
}

// pgAuditTriggers keep lily_audit append-only on PostgreSQL: an UPDATE,
// DELETE or TRUNCATE is refused with an error, as on SQLite.
const pgAuditTriggers = `
CREATE OR REPLACE FUNCTION lily_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'lily_audit is append-only';
END $$;
CREATE TRIGGER lily_audit_no_update BEFORE UPDATE OR DELETE ON lily_audit
	FOR EACH ROW EXECUTE FUNCTION lily_audit_append_only();
CREATE TRIGGER lily_audit_no_truncate BEFORE TRUNCATE ON lily_audit
	FOR EACH STATEMENT EXECUTE FUNCTION lily_audit_append_only();
`

// pgSchemaVersionFunc computes an entry's schema version from its typed
// JSON headers, as schemaVersionExpr does on SQLite: an integer (i8..i64,
// u8..u32) or decimal text (s) in 1..2147483647, else NULL. Declared
// IMMUTABLE (it reads only its argument) so a generated column can use it.
const pgSchemaVersionFunc = `
CREATE OR REPLACE FUNCTION lily_schema_version(h BYTEA) RETURNS INTEGER LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v JSONB;
	t TEXT;
	n NUMERIC;
	code TEXT;
BEGIN
	IF h IS NULL THEN
		RETURN NULL;
	END IF;
	BEGIN
		v := convert_from(h, 'UTF8')::jsonb -> 'x-lily-schema-version';
	EXCEPTION WHEN others THEN
		RETURN NULL;
	END;
	IF v IS NULL OR jsonb_typeof(v) <> 'object' THEN
		RETURN NULL;
	END IF;
	FOREACH code IN ARRAY ARRAY['i32', 'i64', 'i16', 'i8', 'u8', 'u16', 'u32'] LOOP
		IF jsonb_typeof(v -> code) = 'number' THEN
			n := (v ->> code)::numeric;
			EXIT;
		END IF;
	END LOOP;
	IF n IS NULL AND jsonb_typeof(v -> 's') = 'string' THEN
		t := v ->> 's';
		IF t ~ '^[0-9]{1,10}$' THEN
			n := t::numeric;
		END IF;
	END IF;
	IF n IS NOT NULL AND n BETWEEN 1 AND 2147483647 AND n = trunc(n) THEN
		RETURN n::integer;
	END IF;
	RETURN NULL;
END $$;
`
