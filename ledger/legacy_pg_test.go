package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
)

// TestPostgresLedgerKey: after schema step 8 a ledger row is keyed by
// (queue, event_id) alone — the (queue, kind, event_id) key that every ack
// paid a third index entry for is gone — and the only other indexes are
// the age index of pruning and the partial index of rows of an older Lily.
func TestPostgresLedgerKey(t *testing.T) {
	ctx := context.Background()
	s, err := catalog.OpenPostgres(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pk string
	if err := s.DB().QueryRowContext(ctx, `SELECT string_agg(a.attname, ',' ORDER BY k.ord)
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = 'lily_ledger_events'::regclass AND i.indisprimary`).Scan(&pk); err != nil {
		t.Fatal(err)
	}
	if pk != "queue,event_id" {
		t.Errorf("primary key of lily_ledger_events: (%s), want (queue,event_id)", pk)
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT indexname FROM pg_indexes WHERE tablename = 'lily_ledger_events' AND schemaname = current_schema() ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if got := len(names); got != 3 {
		t.Errorf("indexes of lily_ledger_events: %v, want 3 (primary key, age, legacy)", names)
	}
}

// TestPostgresLegacyLookUpOnlyWhileNeeded: counting looks for the bare
// event IDs of an older Lily only while the ledger holds such rows; once
// pruning has removed them, it asks again and stops looking — and a key
// whose bare ID was counted is still not counted twice while the row is
// there.
func TestPostgresLegacyLookUpOnlyWhileNeeded(t *testing.T) {
	ctx := context.Background()
	s, err := catalog.OpenPostgres(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := New(s)
	if err := l.count(ctx, "q", "accepted", []string{Key("a", []byte("x"))}); err != nil {
		t.Fatal(err)
	}
	if got := l.legacy.Load(); got != legacyAbsent {
		t.Fatalf("legacy state %d on a new ledger, want %d (none)", got, legacyAbsent)
	}

	l2 := New(s) // a process started after an older Lily left a row
	old := time.Now().Add(-2 * DefaultHorizon).UnixMilli()
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ('q', 'accepted', 'old', $1)`, old); err != nil {
		t.Fatal(err)
	}
	if err := l2.count(ctx, "q", "accepted", []string{Key("old", []byte("x")), Key("new", []byte("x"))}); err != nil {
		t.Fatal(err)
	}
	if got := l2.legacy.Load(); got != legacyPresent {
		t.Fatalf("legacy state %d with a bare-ID row, want %d (present)", got, legacyPresent)
	}
	if r := ledgerOf(t, s, "q"); r.Accepted != 2 {
		t.Errorf("accepted %d, want 2 (a, new; old was counted by the older Lily)", r.Accepted)
	}
	res, err := l2.Prune(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 1 {
		t.Fatalf("pruned %d rows, want 1 (the older Lily's)", res.Events)
	}
	if got := l2.legacy.Load(); got != legacyUnknown {
		t.Fatalf("legacy state %d after the prune, want %d (ask again)", got, legacyUnknown)
	}
	if err := l2.count(ctx, "q", "acked", []string{Key("new", []byte("x"))}); err != nil {
		t.Fatal(err)
	}
	if got := l2.legacy.Load(); got != legacyAbsent {
		t.Fatalf("legacy state %d after the prune and a count, want %d (none)", got, legacyAbsent)
	}
	if r := ledgerOf(t, s, "q"); r.Accepted != 2 || r.Acked != 1 {
		t.Errorf("ledger %+v, want accepted 2, acked 1", r)
	}
}
