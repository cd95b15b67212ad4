package catalog

import "strings"

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
		b.WriteString("CREATE INDEX " + name + " ON lily_dlq_entries(" + c + ", state, queue, dead_lettered_at) INCLUDE (id) WHERE " + heldCond + ";\n")
	}
	b.WriteString("DROP INDEX IF EXISTS lily_dlq_entries_held_time;\n")
	b.WriteString("CREATE INDEX lily_dlq_entries_held_time ON lily_dlq_entries(queue, state, dead_lettered_at) INCLUDE (id) WHERE " + heldCond + ";\n")
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
