package catalog

import (
	"context"
	"database/sql"
	"reflect"
	"testing"

	"github.com/lily-mq/lily/evidence"
)

// schemaEntries inserts one entry per way a schema version can be stored
// and returns their event IDs by the version they must read as.
func schemaEntries(t *testing.T, s *Store) {
	t.Helper()
	versions := map[string]any{
		"i32-3": int32(3), "i32-3b": int32(3), "text-4": "4", "i64-4": int64(4), "i8-2": int8(2), "uint16-5": uint16(5),
		"none": nil, "bad-text": "v2", "zero": int32(0), "negative": int32(-1), "float": 3.0, "huge": int64(1 << 40),
	}
	var es []*Entry
	for id, v := range versions {
		e := entry("orders.created", id, evidence.ReasonPermanent, StatePending, "boom")
		if v != nil {
			e.Headers[evidence.HeaderSchemaVersion] = v
		}
		es = append(es, e)
	}
	if err := s.Insert(context.Background(), es...); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaVersionColumn: the catalog stores the schema version of each
// entry (x-lily-schema-version, as evidence.SchemaVersion reads it), groups
// by it and filters on it; entries without a readable one are "none".
func TestSchemaVersionColumn(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		schemaEntries(t, s)
		for id, v := range map[string]any{"i32-3": int32(3), "text-4": "4", "bad-text": "v2", "none": nil} {
			want, ok := evidence.SchemaVersion(map[string]any{evidence.HeaderSchemaVersion: v})
			if v == nil {
				want, ok = 0, false
			}
			var got sql.NullInt64
			if err := s.db.QueryRowContext(ctx, `SELECT schema_version FROM lily_dlq_entries WHERE event_id = ?`, id).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got.Valid != ok || int(got.Int64) != want {
				t.Errorf("%s: column %v, evidence.SchemaVersion %d/%v: they must agree", id, got, want, ok)
			}
		}
		counts, err := s.SchemaVersions(ctx, Filter{Queue: "orders.created"})
		if err != nil {
			t.Fatal(err)
		}
		want := []SchemaVersionCount{{0, 6}, {2, 1}, {3, 2}, {4, 2}, {5, 1}}
		if !reflect.DeepEqual(counts, want) {
			t.Errorf("SchemaVersions %v, want %v", counts, want)
		}
		groups, err := s.Group(ctx, "schema_version", Filter{States: HeldStates})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, g := range groups {
			got[g.Key] = g.Count
		}
		if w := map[string]int64{"": 6, "2": 1, "3": 2, "4": 2, "5": 1}; !reflect.DeepEqual(got, w) {
			t.Errorf("group by schema_version %v, want %v", got, w)
		}
		three, none := 3, 0
		es, err := s.List(ctx, Filter{SchemaVersion: &three}, 100)
		if err != nil || len(es) != 2 {
			t.Errorf("filter schema_version 3: %d entries (%v), want 2", len(es), err)
		}
		es, err = s.List(ctx, Filter{SchemaVersion: &none, States: HeldStates}, 100)
		if err != nil || len(es) != 6 {
			t.Errorf("filter schema_version none: %d entries (%v), want 6", len(es), err)
		}
		if f := (Filter{SchemaVersion: &three}).String(); f != `{"schema_version":3}` {
			t.Errorf("audit selector %s", f)
		}
		if n, err := s.NewestSchemaVersion(ctx, "orders.created"); err != nil || n != 5 {
			t.Errorf("newest %d (%v), want 5", n, err)
		}
	})
}
