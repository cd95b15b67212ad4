package catalog

import (
	"context"
	"database/sql"
	"fmt"
)

// The schema version of an entry (x-lily-schema-version) is a generated
// column over the stored headers: no insert path writes it, every entry
// made by an older Lily gets it the moment the column is added, and an
// erased entry (headers removed) has none. It mirrors
// evidence.SchemaVersion on the typed JSON of transport.MarshalHeaders: an
// integer (i8, i16, i32, i64) or decimal text (s) in 1..2147483647; any
// other value — including []byte, which only a foreign SQLite producer
// could store, since the Kafka transport turns decimal text into int32 —
// is NULL, "no schema version".
//
// Filter.SchemaVersion selects on it, Group groups by it ("schema_version"),
// and 'lily dlq redrive' compares it with the queue's schema_versions.

// schemaVersionCond adds f's schema version condition.
func (f Filter) schemaVersionCond(conds *[]string, args *[]any) {
	if f.SchemaVersion == nil {
		return
	}
	if *f.SchemaVersion == 0 {
		*conds = append(*conds, "schema_version IS NULL")
		return
	}
	*conds = append(*conds, "schema_version = ?")
	*args = append(*args, *f.SchemaVersion)
}

// SchemaVersionCount is the number of entries of one schema version.
type SchemaVersionCount struct {
	// Version is the schema version; 0 means none (no readable
	// x-lily-schema-version).
	Version int `json:"version"`
	// Count is the number of entries.
	Count int64 `json:"count"`
}

// SchemaVersions counts the entries matching f per schema version,
// ascending, "none" (0) first.
func (s *Store) SchemaVersions(ctx context.Context, f Filter) ([]SchemaVersionCount, error) {
	where, args := f.where()
	rows, err := s.db.QueryContext(ctx, `SELECT COALESCE(schema_version, 0), COUNT(*) FROM lily_dlq_entries`+where+
		` GROUP BY schema_version ORDER BY COALESCE(schema_version, 0)`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: count schema versions: %w", err)
	}
	defer rows.Close()
	var out []SchemaVersionCount
	for rows.Next() {
		var c SchemaVersionCount
		if err := rows.Scan(&c.Version, &c.Count); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// NewestSchemaVersion returns the highest schema version among the
// entries of queue in any state (0 when none has one).
func (s *Store) NewestSchemaVersion(ctx context.Context, queue string) (int, error) {
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(schema_version) FROM lily_dlq_entries WHERE queue = ?`, queue).Scan(&v); err != nil {
		return 0, fmt.Errorf("catalog: newest schema version of %s: %w", queue, err)
	}
	return int(v.Int64), nil
}
