package catalog

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func TestAuditFilterEventIDActorNewest(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s)
		if _, err := s.Discard(ctx, DecideParams{Filter: Filter{EventIDs: []string{"e1"}}, Reason: "bad", Actor: "alice", Now: fixedNow}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Discard(ctx, DecideParams{Filter: Filter{EventIDs: []string{"e2"}}, Reason: "bad", Actor: "bob", Now: fixedNow}); err != nil {
			t.Fatal(err)
		}
		refused := &AuditRecord{Op: "op-r", Actor: "carol", Action: ActionRefused, Selector: `{"attempted":"erase"}`, Outcome: OutcomeForbidden}
		if err := s.AppendAudit(ctx, refused); err != nil {
			t.Fatal(err)
		}
		actions := func(rs []AuditRecord) []string {
			var out []string
			for _, r := range rs {
				out = append(out, r.Actor+":"+r.Action)
			}
			return out
		}
		if got := actions(audit(t, s, AuditFilter{EventID: "e1"})); !reflect.DeepEqual(got, []string{"alice:discard"}) {
			t.Errorf("event e1's history = %v", got)
		}
		if got := actions(audit(t, s, AuditFilter{Actor: "bob"})); !reflect.DeepEqual(got, []string{"bob:discard"}) {
			t.Errorf("bob's records = %v", got)
		}
		if got := actions(audit(t, s, AuditFilter{Newest: true, Limit: 2})); !reflect.DeepEqual(got, []string{"carol:refused", "bob:discard"}) {
			t.Errorf("newest two = %v", got)
		}
		if got := actions(audit(t, s, AuditFilter{Action: ActionRefused})); !reflect.DeepEqual(got, []string{"carol:refused"}) {
			t.Errorf("refused = %v", got)
		}
	})
}

func TestInflow(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		now := testNow
		for i, age := range []time.Duration{0, 30 * time.Minute, 90 * time.Minute, 150 * time.Minute, 5 * time.Hour} {
			e := entry("q", "i"+string(rune('0'+i)), "permanent", StatePending, "x")
			e.DeadLetteredAt = now.Add(-age)
			if err := s.Insert(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Inflow(ctx, "q", now, time.Hour, 3)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{1, 1, 2}; !reflect.DeepEqual(got, want) {
			t.Errorf("Inflow = %v, want %v (oldest hour first; 5h ago is outside)", got, want)
		}
		if _, err := s.Inflow(ctx, "q", now, 0, 3); err == nil {
			t.Error("Inflow with a zero bucket: no error")
		}
	})
}
