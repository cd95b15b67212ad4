package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/sqlitedb"
)

// fixedNow is the clock of the decisions in these tests.
func fixedNow() time.Time { return testNow.Add(time.Hour) }

// audit returns every audit record.
func audit(t *testing.T, s *Store, f AuditFilter) []AuditRecord {
	t.Helper()
	var out []AuditRecord
	if err := s.EachAudit(context.Background(), f, func(r *AuditRecord) error { out = append(out, *r); return nil }); err != nil {
		t.Fatalf("EachAudit: %v", err)
	}
	return out
}

func states(t *testing.T, s *Store, f Filter) map[string]State {
	t.Helper()
	out := map[string]State{}
	if err := s.Each(context.Background(), f, func(e *Entry) error { out[e.EventID] = e.State; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFilterFields(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		es := seed(t, s)
		es[0].Key, es[0].Type = "k-e1", "order.created" // as seeded
		two := 2
		tests := []struct {
			name string
			f    Filter
			want []string
		}{
			{"error type", Filter{ErrorType: "*lily.TimeoutError"}, []string{"e2"}},
			{"fingerprint", Filter{Fingerprint: evidence.Fingerprint("invalid character 'q' at offset 1")}, []string{"e1", "e3", "e5"}},
			{"consumer version", Filter{ConsumerVersion: "v9"}, []string{"e6"}},
			{"source", Filter{Source: "sqlite/orders.created", States: []State{StateParked}}, []string{"e3"}},
			{"key", Filter{Key: "k-e4"}, []string{"e4"}},
			{"type", Filter{Type: "order.created", Queue: "payments"}, []string{"e3", "e6"}},
			{"ids", Filter{IDs: []int64{es[1].ID, es[6].ID}}, []string{"e2", "e7"}},
			{"event ids", Filter{EventIDs: []string{"e3", "e5", "nope"}}, []string{"e3", "e5"}},
			{"older than", Filter{DeadLetteredBefore: testNow}, nil},
			{"newer than", Filter{DeadLetteredAfter: testNow, Queue: "payments"}, []string{"e3", "e6"}},
			{"redrive count", Filter{RedriveCount: &two}, nil},
			{"after id", Filter{AfterID: es[4].ID}, []string{"e6", "e7"}},
			{"held", Filter{States: HeldStates, Queue: "orders.created"}, []string{"e1", "e2"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var got []string
				if err := s.Each(ctx, tt.f, func(e *Entry) error { got = append(got, e.EventID); return nil }); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Each(%s) = %v, want %v", tt.f, got, tt.want)
				}
			})
		}
		if got := (Filter{Queue: "q", Reason: "permanent"}).String(); got != `{"queue":"q","reason":"permanent"}` {
			t.Errorf("Filter.String = %s", got)
		}
	})
}

func TestGroup(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		es := seed(t, s)
		es[0].DeadLetteredAt = testNow
		got, err := s.Group(ctx, "fingerprint", Filter{States: HeldStates})
		if err != nil {
			t.Fatal(err)
		}
		// Held: e1, e2 (pending), e3 (parked), e6 (needs_manual). e1 and e3
		// differ only in the quoted value and the number.
		if len(got) != 3 || got[0].Count != 2 || got[0].Key != evidence.Fingerprint("invalid character 'x' at offset 12") ||
			got[0].SampleID != es[2].ID || !got[0].FirstSeen.Equal(testNow) || !got[0].LastSeen.Equal(testNow) {
			t.Errorf("Group(fingerprint) = %+v", got)
		}
		// Largest first, then by key.
		got, err = s.Group(ctx, "reason", Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, g := range got {
			keys = append(keys, g.Key)
		}
		if !reflect.DeepEqual(keys, []string{"permanent", "delivery_limit", "retries_exhausted"}) || got[0].Count != 5 {
			t.Errorf("Group(reason) order %v (%+v)", keys, got)
		}
		// Non-held states use no partial index; the result is the same shape.
		got, err = s.Group(ctx, "consumer_version", Filter{States: []State{StateRedriven, StateNeedsManual}})
		if err != nil || len(got) != 2 {
			t.Errorf("Group over mixed states = %+v, %v", got, err)
		}
		if _, err := s.Group(ctx, "body", Filter{}); err == nil || !strings.Contains(err.Error(), "fingerprint") {
			t.Errorf("Group(body) = %v, want an error listing the columns", err)
		}
	})
}

func TestStats(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		old := entry("q", "old", evidence.ReasonPermanent, StatePending, "x")
		old.DeadLetteredAt = testNow.Add(-10 * time.Hour)
		mid := entry("q", "mid", evidence.ReasonPermanent, StateNeedsManual, "x")
		mid.DeadLetteredAt = testNow.Add(-3 * time.Hour)
		recent := entry("q", "recent", evidence.ReasonPermanent, StateRedriven, "x")
		recent.DeadLetteredAt = testNow.Add(-30 * time.Minute)
		if err := s.Insert(ctx, old, mid, recent); err != nil {
			t.Fatal(err)
		}
		addCounts(t, s, "empty", 3, 3)
		got, err := s.Stats(ctx, testNow, func(q string) time.Duration { return 12 * time.Hour })
		if err != nil {
			t.Fatal(err)
		}
		want := []QueueStats{
			{Queue: "empty", Retention: 12 * time.Hour},
			{Queue: "q", Depth: 2, Pending: 1, NeedsManual: 1, Oldest: old.DeadLetteredAt, Retention: 12 * time.Hour,
				Deadline: old.DeadLetteredAt.Add(12 * time.Hour), PastHalfRetention: 1, InflowLastHour: 1},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Stats:\n got %+v\nwant %+v", got, want)
		}
	})
}

func TestDiscard(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		if _, err := s.Discard(ctx, DecideParams{Reason: "  "}); !errors.Is(err, ErrEmptyReason) {
			t.Errorf("Discard without a reason = %v", err)
		}
		if _, err := s.Discard(ctx, DecideParams{Reason: "x", Filter: Filter{States: []State{StateRedriven}}}); err == nil {
			t.Error("Discard of redriven entries accepted")
		}
		var seen []string
		res, err := s.Discard(ctx, DecideParams{Filter: Filter{Reason: "permanent"}, Reason: "bad schema", Actor: "carol", Now: fixedNow,
			OnEntry: func(r EntryRef) { seen = append(seen, r.EventID) }})
		if err != nil || res.Count != 3 {
			t.Fatalf("Discard = %+v, %v", res, err)
		}
		// Held permanent entries: e1 (pending), e3 (parked), e6 (needs_manual), state by state.
		if !reflect.DeepEqual(seen, []string{"e1", "e3", "e6"}) {
			t.Errorf("discarded %v", seen)
		}
		e, _ := s.Get(ctx, 1)
		// The record stays, the data goes, in the same transaction.
		if e.State != StateDiscarded || e.DecidedBy != "carol" || e.Decision != "discarded: bad schema" || e.BodySHA256 == "" ||
			e.Body != nil || e.Headers != nil || e.BodySize != 11 || e.HeadersSize < 100 || !e.ErasedAt.Equal(fixedNow()) ||
			e.ErrorType == "" || e.Reason != "permanent" {
			t.Errorf("discarded entry %+v", e)
		}
		noData(t, s, 1)
		// The ledger counts them discarded: ledger.TestLedgerAfterDiscard.
		// A dry run lists and audits, changes nothing; an empty one is audited.
		res, err = s.Discard(ctx, DecideParams{Reason: "all", DryRun: true})
		if err != nil || res.Count != 1 {
			t.Errorf("dry run = %+v, %v", res, err)
		}
		if st := states(t, s, Filter{EventIDs: []string{"e2"}}); st["e2"] != StatePending {
			t.Errorf("a dry run discarded e2")
		}
		res, _ = s.Discard(ctx, DecideParams{Reason: "none", Filter: Filter{Queue: "nope"}})
		recs := audit(t, s, AuditFilter{Action: ActionDiscard})
		// One record per batch (and per state: pending, parked, needs_manual).
		if len(recs) != 5 || recs[0].Op != recs[2].Op || recs[2].Count != 1 || recs[3].Outcome != OutcomeWouldDiscard || !recs[3].DryRun ||
			recs[4].Outcome != OutcomeEmpty || recs[4].Op != res.Op {
			t.Errorf("discard audit %+v", recs)
		}
	})
}

func TestErase(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		if _, err := s.Erase(ctx, DecideParams{}); !errors.Is(err, ErrNoSubject) {
			t.Errorf("Erase without a subject = %v", err)
		}
		res, err := s.Erase(ctx, DecideParams{Filter: Filter{EventIDs: []string{"e1", "e4", "e5"}}, Reason: "request 42", Actor: "dpo", Now: fixedNow})
		if err != nil || res.Count != 3 {
			t.Fatalf("Erase = %+v, %v", res, err)
		}
		want := map[string]State{"e1": StateErased, "e4": StateRedriven, "e5": StateDiscarded}
		for id, st := range want {
			var e *Entry
			s.Each(ctx, Filter{EventIDs: []string{id}}, func(x *Entry) error { e = x; return nil })
			if e.State != st || e.Body != nil || e.Headers != nil || e.ErrorMessage != "" || e.ErasedAt.IsZero() ||
				e.BodySHA256 == "" || e.EventID != id || e.DecidedBy != "dpo" || e.Decision != "erased: request 42" {
				t.Errorf("tombstone %s: %+v", id, e)
			}
		}
		// Erasing again selects nothing.
		if res, _ := s.Erase(ctx, DecideParams{Filter: Filter{Key: "k-e1"}}); res.Count != 0 {
			t.Errorf("second erase = %+v", res)
		}
	})
}

func TestExpire(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		old := entry("a", "old", evidence.ReasonPermanent, StatePending, "x")
		old.DeadLetteredAt = testNow.Add(-50 * time.Hour)
		oldRedriven := entry("a", "old-redriven", evidence.ReasonPermanent, StateRedriven, "x")
		oldRedriven.DeadLetteredAt = testNow.Add(-50 * time.Hour)
		young := entry("a", "young", evidence.ReasonPermanent, StatePending, "x")
		young.DeadLetteredAt = testNow.Add(-10 * time.Hour)
		otherQ := entry("b", "b-old", evidence.ReasonPermanent, StateParked, "x")
		otherQ.DeadLetteredAt = testNow.Add(-50 * time.Hour)
		if err := s.Insert(ctx, old, oldRedriven, young, otherQ); err != nil {
			t.Fatal(err)
		}
		ret := func(q string) time.Duration {
			if q == "a" {
				return 24 * time.Hour
			}
			return 0 // default: 336h
		}
		now := func() time.Time { return testNow }
		dry, err := s.Expire(ctx, ExpireParams{Retention: ret, DryRun: true, Now: now})
		if err != nil || dry.Count != 1 || dry.ByQueue["a"] != 1 {
			t.Fatalf("dry expire = %+v, %v", dry, err)
		}
		res, err := s.Expire(ctx, ExpireParams{Retention: ret, Now: now, Actor: "cron"})
		if err != nil || res.Count != 1 || !reflect.DeepEqual(res.ByQueue, map[string]int{"a": 1}) {
			t.Fatalf("Expire = %+v, %v", res, err)
		}
		e, _ := s.Get(ctx, old.ID)
		if e.State != StateDiscarded || e.DecidedBy != "cron" || !strings.Contains(e.Decision, "dlq_retention_hours = 24") ||
			e.Body != nil || e.BodySize == 0 || e.ErasedAt.IsZero() {
			t.Errorf("expired entry %+v", e)
		}
		noData(t, s, old.ID)
		if st := states(t, s, Filter{}); st["young"] != StatePending || st["b-old"] != StateParked || st["old-redriven"] != StateRedriven {
			t.Errorf("states after expire %v", st)
		}
		// Nothing left to expire: no audit record (it runs periodically).
		n := len(audit(t, s, AuditFilter{}))
		if res, err := s.Expire(ctx, ExpireParams{Retention: ret, Now: now, Queues: []string{"a"}}); err != nil || res.Count != 0 {
			t.Errorf("second Expire = %+v, %v", res, err)
		}
		recs := audit(t, s, AuditFilter{})
		if len(recs) != n || len(recs) != 2 || recs[0].Outcome != OutcomeWouldExpire || recs[1].Outcome != OutcomeExpired ||
			!strings.Contains(recs[1].Selector, `"dlq_retention_hours":24`) {
			t.Errorf("expire audit %+v", recs)
		}
	})
}

func TestAuditAppendOnly(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		r := &AuditRecord{Op: "op", Actor: "a", Action: ActionDiscard, Outcome: OutcomeDiscarded, EventIDs: []string{"x"}, At: testNow}
		if err := s.AppendAudit(ctx, r); err != nil || r.ID == 0 {
			t.Fatalf("AppendAudit = %v (id %d)", err, r.ID)
		}
		for _, q := range []string{`UPDATE lily_audit SET actor = 'mallory'`, `DELETE FROM lily_audit`} {
			if _, err := s.DB().ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s = %v, want refused", q, err)
			}
		}
		if got := audit(t, s, AuditFilter{Since: testNow.Add(time.Second)}); len(got) != 0 {
			t.Errorf("Since filter: %+v", got)
		}
		if got := audit(t, s, AuditFilter{Since: testNow, Action: ActionDiscard}); len(got) != 1 || got[0].Actor != "a" || !got[0].At.Equal(testNow) {
			t.Errorf("audit %+v", got)
		}
		if DefaultActor() == "" || !strings.Contains(NewOp(testNow), "20261129T120000Z-") {
			t.Errorf("DefaultActor %q, NewOp %q", DefaultActor(), NewOp(testNow))
		}
	})
}

func TestMigrateOlderDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The first release's entries table, without the decision columns.
	_, err = db.ExecContext(ctx, `CREATE TABLE lily_dlq_entries (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, event_id TEXT NOT NULL,
		msg_key TEXT NOT NULL DEFAULT '', msg_type TEXT NOT NULL DEFAULT '', body BLOB, headers BLOB, body_sha256 TEXT NOT NULL,
		reason TEXT NOT NULL, error_type TEXT NOT NULL DEFAULT '', error_message TEXT NOT NULL DEFAULT '', fingerprint TEXT NOT NULL DEFAULT '',
		consumer_version TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '', delivery_count INTEGER NOT NULL DEFAULT 0,
		retry_count INTEGER NOT NULL DEFAULT 0, redrive_count INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL DEFAULT 'pending',
		dead_lettered_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, dl_key TEXT, duplicates INTEGER NOT NULL DEFAULT 0);
		INSERT INTO lily_dlq_entries(queue, event_id, body_sha256, reason, dead_lettered_at, updated_at, headers) VALUES ('q', 'e', 'h', 'permanent', 1, 1, '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, db)
	if err != nil {
		t.Fatalf("New on an older database: %v", err)
	}
	if _, err := s.Discard(ctx, DecideParams{Reason: "old", Actor: "a"}); err != nil {
		t.Errorf("Discard on a migrated database: %v", err)
	}
	if e, err := s.Get(ctx, 1); err != nil || e.State != StateDiscarded || e.DecidedBy != "a" {
		t.Errorf("migrated entry %+v, %v", e, err)
	}
	db.Close()
}

// noData reads the raw table: entry id keeps no body and no headers.
func noData(t *testing.T, s *Store, id int64) {
	t.Helper()
	var body, headers []byte
	var bodySize int64
	if err := s.db.QueryRowContext(context.Background(), `SELECT body, headers, body_size FROM lily_dlq_entries WHERE id = ?`, id).
		Scan(&body, &headers, &bodySize); err != nil {
		t.Fatal(err)
	}
	if body != nil || headers != nil || bodySize == 0 {
		t.Errorf("entry %d in the table: body %q, headers %q, body_size %d; want no data and its size", id, body, headers, bodySize)
	}
}
