package catalog

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lily-mq/lily/evidence"
)

func strp(s string) *string { return &s }

func TestTriageValidation(t *testing.T) {
	tests := []struct {
		name  string
		c     TriageChange
		field string
	}{
		{"nothing", TriageChange{}, "status"},
		{"blank note only", TriageChange{Note: "  "}, "status"},
		{"bad status", TriageChange{Status: strp("fixed")}, "status"},
		{"ticket not a URL", TriageChange{Ticket: strp("JIRA-42")}, "ticket"},
		{"ticket ftp", TriageChange{Ticket: strp("ftp://tracker/42")}, "ticket"},
		{"ticket no host", TriageChange{Ticket: strp("https:///42")}, "ticket"},
		{"assignee escape", TriageChange{Assignee: strp("bob\x1b[2J")}, "assign"},
		{"assignee spaces", TriageChange{Assignee: strp(" bob")}, "assign"},
		{"note too long", TriageChange{Note: strings.Repeat("x", maxNote+1)}, "note"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var te *TriageError
			if err := tt.c.Validate(); !errors.As(err, &te) || te.Field != tt.field {
				t.Fatalf("Validate = %v, want a TriageError on %s", err, tt.field)
			}
		})
	}
	for _, ok := range []TriageChange{
		{Status: strp(TriageKnownIssue)}, {Status: strp("")}, {Ticket: strp("https://tracker.example.com/ISSUE-42")},
		{Ticket: strp("")}, {Assignee: strp("alice")}, {Note: "looked at it"},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", ok, err)
		}
	}
}

func TestTriageEntriesAndGroups(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		es := seed(t, s)
		fp := evidence.Fingerprint("invalid character 'x' at offset 12") // e1 (held), e5 (discarded); e3 in payments
		// An entry triage: assignee, status, ticket and a note.
		res, err := s.TriageEntries(ctx, TriageParams{Filter: Filter{IDs: []int64{es[1].ID}}, Actor: "alice", Now: fixedNow,
			Change: TriageChange{Assignee: strp("alice"), Status: strp(TriageNeedsFix), Ticket: strp("https://t.example/OPS-1"), Note: "timeouts from the tax service"}})
		if err != nil || res.Count != 1 {
			t.Fatalf("TriageEntries = %+v, %v", res, err)
		}
		// A second change keeps what it does not name and appends the note.
		if _, err := s.TriageEntries(ctx, TriageParams{Filter: Filter{IDs: []int64{es[1].ID}}, Actor: "bob", Now: fixedNow,
			Change: TriageChange{Status: strp(TriageInvestigating), Note: "tax service owner paged"}}); err != nil {
			t.Fatal(err)
		}
		tr, err := s.EntryTriage(ctx, es[1])
		if err != nil {
			t.Fatal(err)
		}
		if tr.Entry == nil || tr.Entry.Assignee != "alice" || tr.Entry.Status != TriageInvestigating || tr.Entry.Ticket != "https://t.example/OPS-1" ||
			tr.Entry.UpdatedBy != "bob" || tr.Status != TriageInvestigating || tr.Group != nil {
			t.Fatalf("entry triage = %+v", tr)
		}
		var notes []string
		for _, n := range tr.Entry.Notes {
			notes = append(notes, n.Author+": "+n.Note)
		}
		if want := []string{"alice: timeouts from the tax service", "bob: tax service owner paged"}; !reflect.DeepEqual(notes, want) {
			t.Errorf("notes = %q, want %q", notes, want)
		}
		// Clearing the assignee.
		if _, err := s.TriageEntries(ctx, TriageParams{Filter: Filter{IDs: []int64{es[1].ID}}, Actor: "bob", Change: TriageChange{Assignee: strp("")}}); err != nil {
			t.Fatal(err)
		}
		if tr, _ = s.EntryTriage(ctx, es[1]); tr.Entry.Assignee != "" || tr.Entry.Status != TriageInvestigating {
			t.Errorf("after clearing the assignee: %+v", tr.Entry)
		}

		// The group of e1's fingerprint in orders.created is a known issue.
		if known, err := s.KnownIssueHeld(ctx); err != nil || len(known) != 0 {
			t.Fatalf("KnownIssueHeld before = %v, %v", known, err)
		}
		gr, err := s.TriageGroup(ctx, TriageGroupParams{Queue: "orders.created", Fingerprint: fp, Actor: "alice", Now: fixedNow,
			Change: TriageChange{Status: strp(TriageKnownIssue), Note: "bad producer, fix in shop-web 4.2"}})
		if err != nil || gr.Count != 1 || len(gr.Groups) != 1 {
			t.Fatalf("TriageGroup = %+v, %v", gr, err)
		}
		wantKnown := func(want map[string]int64) {
			t.Helper()
			got, err := s.KnownIssueHeld(ctx)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("KnownIssueHeld = %v, %v; want %v", got, err, want)
			}
		}
		wantKnown(map[string]int64{"orders.created": 1})
		// A new dead letter of the fingerprint inherits the status.
		e8 := entry("orders.created", "e8", evidence.ReasonPermanent, StatePending, `invalid character 'w' at offset 3`)
		if err := s.Insert(ctx, e8); err != nil {
			t.Fatal(err)
		}
		wantKnown(map[string]int64{"orders.created": 2})
		if tr, _ = s.EntryTriage(ctx, e8); tr.Status != TriageKnownIssue || tr.Entry != nil || tr.Group == nil ||
			len(tr.Group.Notes) != 1 || tr.Group.Notes[0].Note != "bad producer, fix in shop-web 4.2" {
			t.Errorf("e8 triage = %+v", tr)
		}
		// An entry's own status wins over its group's, both ways.
		if _, err := s.TriageEntries(ctx, TriageParams{Filter: Filter{IDs: []int64{e8.ID}}, Change: TriageChange{Status: strp(TriageInvestigating)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TriageEntries(ctx, TriageParams{Filter: Filter{IDs: []int64{es[5].ID}}, Change: TriageChange{Status: strp(TriageKnownIssue)}}); err != nil {
			t.Fatal(err)
		}
		wantKnown(map[string]int64{"orders.created": 1, "payments": 1})
		st, err := s.TriageStatusOf(ctx, []*Entry{es[0], es[1], es[2], e8})
		if want := map[int64]string{es[0].ID: TriageKnownIssue, es[1].ID: TriageInvestigating, e8.ID: TriageInvestigating}; err != nil || !reflect.DeepEqual(st, want) {
			t.Errorf("TriageStatusOf = %v, %v; want %v", st, err, want)
		}
		// A decided entry leaves the count.
		if _, err := s.Discard(ctx, DecideParams{Filter: Filter{IDs: []int64{es[0].ID}}, Reason: "known", Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		wantKnown(map[string]int64{"payments": 1})

		// Without a queue: every queue that has entries of the fingerprint.
		gr, err = s.TriageGroup(ctx, TriageGroupParams{Fingerprint: fp, Change: TriageChange{Assignee: strp("carol")}})
		if err != nil || len(gr.Groups) != 2 {
			t.Fatalf("TriageGroup without a queue = %+v, %v", gr, err)
		}
		gs, err := s.GroupTriages(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if g := gs[GroupKey{"orders.created", fp}]; g == nil || g.Assignee != "carol" || g.Status != TriageKnownIssue {
			t.Errorf("orders.created group = %+v", g)
		}
		if g := gs[GroupKey{"payments", fp}]; g == nil || g.Assignee != "carol" || g.Status != "" {
			t.Errorf("payments group = %+v", g)
		}
		if _, err := s.TriageGroup(ctx, TriageGroupParams{Fingerprint: "no such fingerprint", Change: TriageChange{Note: "x"}}); !errors.Is(err, ErrNoGroup) {
			t.Errorf("TriageGroup of an unknown fingerprint = %v, want ErrNoGroup", err)
		}
		// In advance, with a queue: allowed.
		if _, err := s.TriageGroup(ctx, TriageGroupParams{Queue: "payments", Fingerprint: "no such fingerprint", Change: TriageChange{Status: strp(TriageWontFix)}}); err != nil {
			t.Errorf("TriageGroup in advance: %v", err)
		}

		// Every change is audited; the note history is append-only.
		recs := audit(t, s, AuditFilter{Action: ActionTriage})
		if len(recs) != 9 {
			t.Fatalf("%d triage audit records, want 9: %+v", len(recs), recs)
		}
		if r := recs[0]; r.Actor != "alice" || r.Count != 1 || !reflect.DeepEqual(r.EventIDs, []string{"e2"}) || !strings.Contains(r.Detail, `"status":"needs_fix"`) {
			t.Errorf("first triage record = %+v", r)
		}
		if r := recs[3]; r.Count != 1 || !strings.Contains(r.Selector, `"fingerprint"`) || !strings.Contains(r.Detail, "known_issue") {
			t.Errorf("group triage record = %+v", r)
		}
		for _, q := range []string{`UPDATE lily_triage_notes SET note = 'x'`, `DELETE FROM lily_triage_notes`} {
			if _, err := s.db.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s: %v, want refused as append-only", q, err)
			}
		}
	})
}
