package catalogdb

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

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
	{7, "one ledger row per message identity (unique queue, event_id); per-writer ledger counters", func() string {
		return pgLedgerKeyUnique + pgLedgerDeltas
	}},
	{8, "ledger rows keyed by (queue, event_id) alone; an index of the bare-ID rows of an older Lily", func() string {
		return pgLedgerLeanKey
	}},
	{9, "consumer heartbeats and queue pauses", func() string { return pgDDL(presenceSchema) }},
}

// pgLedgerKeyUnique makes a message identity's ledger row unique whatever
// its kind, so that first-receipt dedupe is decided by the index, not by
// a snapshot (package ledger's counting). An older Lily kept an accepted
// and an acked row per message; the accepted one of such a pair says
// nothing the acked one does not (acked implies accepted), and is
// removed. The counters are untouched.
const pgLedgerKeyUnique = `DELETE FROM lily_ledger_events a USING lily_ledger_events b
	WHERE a.queue = b.queue AND a.event_id = b.event_id AND a.kind = 'accepted' AND b.kind = 'acked';
CREATE UNIQUE INDEX lily_ledger_events_key ON lily_ledger_events(queue, event_id);
`

// pgLedgerLeanKey drops the ledger rows' first primary key (queue, kind,
// event_id): since step 7 a row is unique by (queue, event_id) whatever
// its kind, so that index says nothing the unique one does not, and every
// ack — which turns a row's kind — paid for a third index entry (the
// fleet's ack statement was the catalog's costliest, issue 29). The unique
// index becomes the primary key. The partial index holds only rows of an
// older Lily, whose keys are bare event IDs (no body digest after the
// separator \x1f): LedgerHasLegacySQL asks it whether any are left, so
// that counting looks for them only while there are some.
const pgLedgerLeanKey = `ALTER TABLE lily_ledger_events DROP CONSTRAINT lily_ledger_events_pkey;
ALTER TABLE lily_ledger_events ADD CONSTRAINT lily_ledger_events_pkey PRIMARY KEY USING INDEX lily_ledger_events_key;
CREATE INDEX lily_ledger_events_legacy ON lily_ledger_events(queue) WHERE strpos(event_id, chr(31)) = 0;
`

// LedgerHasLegacySQL reports (one boolean) whether the PostgreSQL ledger
// holds rows written by an older Lily, keyed by a bare event ID; it reads
// the partial index of step 8. No Lily writes such rows any more (an older
// one refuses a schema newer than it knows), so once none are left none
// come back.
const LedgerHasLegacySQL = `SELECT EXISTS (SELECT 1 FROM lily_ledger_events WHERE strpos(event_id, chr(31)) = 0)`

// pgLedgerDeltas holds the ledger's counters as PostgreSQL raises them:
// one row per queue and writer (the backend process of the connection
// that counted, pg_backend_pid()), so that consumer processes counting at
// once never wait on one queue's row of lily_ledger. A reader adds them
// to lily_ledger's (LedgerCountsSQL); pruning folds them into lily_ledger
// (FoldLedgerDeltasSQL). docs/catalog.md explains why both stay exact.
const pgLedgerDeltas = `CREATE TABLE lily_ledger_deltas (
	queue    TEXT   NOT NULL,
	writer   BIGINT NOT NULL,
	accepted BIGINT NOT NULL DEFAULT 0,
	acked    BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (queue, writer)
);`

// PostgresSchemaVersion is the newest step of the PostgreSQL schema this
// Lily knows. Steps are numbered 1, 2, … without gaps.
func PostgresSchemaVersion() int { return pgMigrations[len(pgMigrations)-1].version }

// MigratePostgres applies the steps of pgMigrations the database lacks.
// Processes that start at once wait for each other on a session advisory
// lock ("lily:migrate"),
// so every step runs exactly once.
func MigratePostgres(ctx context.Context, h *DB) error {
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

// pgGroupIndexes is migration step 2's first half: on PostgreSQL an index
// entry does not carry the row's ID as SQLite's does, so the per-column
// indexes over held entries, whose key is what 'lily dlq group' reads
// (column, state, queue, dead_lettered_at), get the ID as an INCLUDE
// column. Group's aggregate (count, first and last seen, MAX(id) as the
// sample) is then an index-only scan read in key order — no table access,
// no sort — instead of a scan of the whole table with every body in it.
// The held-time index gets it too, for grouping by queue or state.
var pgGroupIndexes = func() string {
	var b strings.Builder
	for _, c := range []string{"reason", "error_type", "fingerprint", "consumer_version", "source", "schema_version"} {
		name := "lily_dlq_entries_held_" + c
		b.WriteString("DROP INDEX IF EXISTS " + name + ";\n")
		b.WriteString("CREATE INDEX " + name + " ON lily_dlq_entries(" + c + ", state, queue, dead_lettered_at) INCLUDE (id) WHERE " + HeldCond + ";\n")
	}
	b.WriteString("DROP INDEX IF EXISTS lily_dlq_entries_held_time;\n")
	b.WriteString("CREATE INDEX lily_dlq_entries_held_time ON lily_dlq_entries(queue, state, dead_lettered_at) INCLUDE (id) WHERE " + HeldCond + ";\n")
	return b.String()
}()

// pgSchemaVersionTrigger is migration step 2's second half: schema_version
// stops being a stored generated column, which PostgreSQL computes again
// on every UPDATE of a row whatever the UPDATE sets — parsing the headers'
// JSON for each entry a redrive, discard or expire marks — and is kept by
// a trigger instead, computed when a row is inserted or its headers
// change (an erase clears them: the version becomes NULL, as before). The
// values already there stay (DROP EXPRESSION keeps them).
const pgSchemaVersionTrigger = `
ALTER TABLE lily_dlq_entries ALTER COLUMN schema_version DROP EXPRESSION;
CREATE OR REPLACE FUNCTION lily_dlq_entries_schema_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.schema_version := lily_schema_version(NEW.headers);
	RETURN NEW;
END $$;
CREATE TRIGGER lily_dlq_entries_schema_version BEFORE INSERT OR UPDATE OF headers, schema_version ON lily_dlq_entries
	FOR EACH ROW EXECUTE FUNCTION lily_dlq_entries_schema_version();
`

// pgTriage is PostgreSQL migration step 3: the triage tables with an
// append-only note history.
const pgTriage = `
CREATE OR REPLACE FUNCTION lily_triage_notes_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'lily_triage_notes is append-only';
END $$;
CREATE TRIGGER lily_triage_notes_no_update BEFORE UPDATE OR DELETE ON lily_triage_notes
	FOR EACH ROW EXECUTE FUNCTION lily_triage_notes_append_only();
CREATE TRIGGER lily_triage_notes_no_truncate BEFORE TRUNCATE ON lily_triage_notes
	FOR EACH STATEMENT EXECUTE FUNCTION lily_triage_notes_append_only();
`

// pgRedirectJobs adds the redirect target of redrive jobs (PostgreSQL
// step 3).
const pgRedirectJobs = `ALTER TABLE lily_redrive_jobs ADD COLUMN to_queue TEXT NOT NULL DEFAULT '';`

// pgSearchSchema is migration step 4 on PostgreSQL: the search index, its
// triggers, the backfill marker (entries up to upto, written before the
// index existed, are indexed by BackfillSearch on open) and the JSON
// functions of the --where language (package catalog/where).
const pgSearchSchema = `
CREATE TABLE lily_dlq_search (
	entry_id BIGINT PRIMARY KEY,
	text     TEXT     NOT NULL,
	doc      TSVECTOR NOT NULL
);
CREATE INDEX lily_dlq_search_doc ON lily_dlq_search USING GIN (doc);
CREATE OR REPLACE FUNCTION lily_dlq_search_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM lily_dlq_search WHERE entry_id = OLD.id;
	RETURN NULL;
END $$;
CREATE TRIGGER lily_dlq_search_remove AFTER UPDATE OF body ON lily_dlq_entries
	FOR EACH ROW WHEN (NEW.body IS NULL) EXECUTE FUNCTION lily_dlq_search_forget();
CREATE TRIGGER lily_dlq_search_delete AFTER DELETE ON lily_dlq_entries
	FOR EACH ROW EXECUTE FUNCTION lily_dlq_search_forget();
CREATE TABLE lily_search_backfill (id INTEGER PRIMARY KEY, upto BIGINT NOT NULL, next BIGINT NOT NULL);
INSERT INTO lily_search_backfill(id, upto, next) SELECT 1, COALESCE(MAX(id), 0), 0 FROM lily_dlq_entries;
` + pgWhereFuncs

// lily_json traps the cast's error, a subtransaction, which a parallel
// worker cannot start: it is PARALLEL UNSAFE, so a --where query runs in
// one process.
//
// pgWhereFuncs are the PostgreSQL counterparts of SQLite's JSON functions
// that catalog/where's SQL uses, with SQLite's names and results: lily_json(bytea) is
// the body as jsonb or NULL, json_type(jsonb, path) names the value's
// type as SQLite does ('text', 'integer', 'real', 'true', 'false', 'null',
// 'object', 'array'; NULL when the path is absent) and
// json_extract(jsonb, path) its scalar value as text. Paths are the subset
// both SQLite and SQL/JSON read ($.a.b[0]."c d"), evaluated strictly.
const pgWhereFuncs = `
CREATE OR REPLACE FUNCTION lily_json(b BYTEA) RETURNS JSONB LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE AS $$
BEGIN
	IF b IS NULL THEN
		RETURN NULL;
	END IF;
	RETURN convert_from(b, 'UTF8')::jsonb;
EXCEPTION WHEN others THEN
	RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION json_type(j JSONB, p TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT CASE jsonb_typeof(v)
		WHEN 'string' THEN 'text'
		WHEN 'number' THEN CASE WHEN v::text ~ '^-?[0-9]+$' THEN 'integer' ELSE 'real' END
		WHEN 'boolean' THEN v::text
		ELSE jsonb_typeof(v) END
	FROM (SELECT jsonb_path_query_first(j, ('strict ' || p)::jsonpath, '{}', true) AS v) s
$$;
CREATE OR REPLACE FUNCTION json_extract(j JSONB, p TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT jsonb_path_query_first(j, ('strict ' || p)::jsonpath, '{}', true) #>> '{}'
$$;
`
