package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/pgtest"
)

// insertPending inserts pending entries e0..e<n-1> on queue orders and
// returns their IDs by event ID.
func insertPending(t *testing.T, s *catalog.Store, n int) map[string]int64 {
	t.Helper()
	es := make([]*catalog.Entry, n)
	for i := range es {
		es[i] = catalogtest.Entry("orders", fmt.Sprint("e", i), evidence.ReasonPermanent, catalog.StatePending, "boom")
	}
	ctx := context.Background()
	if err := s.Insert(ctx, es...); err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	rows, err := s.DB().QueryContext(ctx, `SELECT event_id, id FROM lily_dlq_entries`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ev string
		var id int64
		if err := rows.Scan(&ev, &id); err != nil {
			t.Fatal(err)
		}
		ids[ev] = id
	}
	return ids
}

// TestPostgresEntryDecisionsTakeNoFleetLock: while another process holds
// one entry's row (as a redrive's claim or a discard does), a discard, a
// triage and an edit of other entries complete. Before issue 29 each took
// the catalog's lock exclusively and waited.
func TestPostgresEntryDecisionsTakeNoFleetLock(t *testing.T) {
	ss := pgFleet(t, 2)
	ctx := context.Background()
	ids := insertPending(t, ss[0], 3)
	catalogtest.HoldEntry(t, ss[0], "e0")
	s := ss[1]
	if err := pgtest.Finishes(t, "a discard", func() error {
		res, err := s.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{EventIDs: []string{"e1"}}, Reason: "test", Actor: "t"})
		if err == nil && res.Count != 1 {
			err = fmt.Errorf("discarded %d, want 1", res.Count)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	status := "investigating"
	if err := pgtest.Finishes(t, "a triage", func() error {
		_, err := s.TriageEntries(ctx, catalog.TriageParams{Filter: catalog.Filter{EventIDs: []string{"e1", "e2"}}, Change: catalog.TriageChange{Status: &status}, Actor: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Finishes(t, "an edit", func() error {
		_, err := s.Edit(ctx, catalog.EditParams{ID: ids["e2"], Body: []byte(`{"id":"fixed"}`), ContentType: "application/json", Reason: "fix", Actor: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresDiscardsExact: four processes discard the same 100 pending
// entries at once, in batches: each entry is discarded by one of them,
// and the audit names it once. Without the rows' locks a discard that had
// read an entry pending overwrote another's discard and audited it again.
func TestPostgresDiscardsExact(t *testing.T) {
	const procs, n = 4, 100
	ss := pgFleet(t, procs)
	ctx := context.Background()
	insertPending(t, ss[0], n)
	var wg sync.WaitGroup
	counts := make([]int, procs)
	for p, s := range ss {
		wg.Go(func() {
			// Limits below the batch make each process commit many
			// small batches that interleave with the others'.
			for range n {
				res, err := s.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{Queue: "orders"}, Limit: 3, Reason: fmt.Sprint("p", p), Actor: "t"})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Count == 0 {
					return
				}
				counts[p] += res.Count
			}
		})
	}
	wg.Wait()
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != n {
		t.Errorf("discarded %v (%d in all), want %d", counts, total, n)
	}
	named := map[string]int{}
	if err := ss[0].EachAudit(ctx, catalog.AuditFilter{Action: catalog.ActionDiscard}, func(r *catalog.AuditRecord) error {
		if r.Outcome == catalog.OutcomeDiscarded {
			for _, id := range r.EventIDs {
				named[id]++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if c := named[fmt.Sprint("e", i)]; c != 1 {
			t.Errorf("e%d named by %d discard records, want 1", i, c)
		}
	}
}

// TestPostgresEditsExact: four processes edit one entry at once, each
// with a body of its own: the entry has versions 1 to 4, each built on
// the one before (its prev_sha256 is that version's hash), and the audit
// has the four edits. Without the row's lock two edits read the same
// latest version and the second failed on the version's key.
func TestPostgresEditsExact(t *testing.T) {
	const procs = 4
	ss := pgFleet(t, procs)
	ctx := context.Background()
	id := insertPending(t, ss[0], 1)["e0"]
	var wg sync.WaitGroup
	for p, s := range ss {
		wg.Go(func() {
			if _, err := s.Edit(ctx, catalog.EditParams{ID: id, Body: fmt.Appendf(nil, `{"id":"p%d"}`, p), ContentType: "application/json", Reason: "fix", Actor: "t"}); err != nil {
				t.Errorf("edit from process %d: %v", p, err)
			}
		})
	}
	wg.Wait()
	vs, err := ss[0].Versions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != procs+1 {
		t.Fatalf("%d versions, want the original and %d edits", len(vs), procs)
	}
	for i := 1; i < len(vs); i++ {
		if vs[i].Version != i || vs[i].PrevSHA256 != vs[i-1].BodySHA256 {
			t.Errorf("version %d (number %d) built on %s, want on version %d's %s", i, vs[i].Version, vs[i].PrevSHA256, i-1, vs[i-1].BodySHA256)
		}
	}
	if recs := auditOf(t, ss[0], catalog.ActionEdit); recs != procs {
		t.Errorf("%d edit records, want %d", recs, procs)
	}
}

// TestPostgresTriagesExact: four processes triage the same 20 entries at
// once, each setting its own assignee with a note: every entry keeps the
// four notes and one of the four assignees (the last writer's), and the
// audit has each process's record naming the 20.
func TestPostgresTriagesExact(t *testing.T) {
	const procs, n = 4, 20
	ss := pgFleet(t, procs)
	ctx := context.Background()
	insertPending(t, ss[0], n)
	var wg sync.WaitGroup
	for p, s := range ss {
		wg.Go(func() {
			who := fmt.Sprint("p", p)
			if _, err := s.TriageEntries(ctx, catalog.TriageParams{Filter: catalog.Filter{Queue: "orders"}, Change: catalog.TriageChange{Assignee: &who, Note: fmt.Sprint("note ", p)}, Actor: "t"}); err != nil {
				t.Errorf("triage from process %d: %v", p, err)
			}
		})
	}
	wg.Wait()
	var notes, entries, assigned int
	if err := ss[0].DB().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM lily_triage_notes), (SELECT COUNT(*) FROM lily_triage_entries),
		(SELECT COUNT(*) FROM lily_triage_entries WHERE assignee IN ('p0', 'p1', 'p2', 'p3'))`).Scan(&notes, &entries, &assigned); err != nil {
		t.Fatal(err)
	}
	if notes != procs*n || entries != n || assigned != n {
		t.Errorf("%d notes on %d triaged entries (%d assigned to one of the processes), want %d notes on %d", notes, entries, assigned, procs*n, n)
	}
	if recs := auditOf(t, ss[0], catalog.ActionTriage); recs != procs {
		t.Errorf("%d triage records, want %d", recs, procs)
	}
}

// auditOf counts the audit records of action.
func auditOf(t *testing.T, s *catalog.Store, action string) int {
	t.Helper()
	n := 0
	if err := s.EachAudit(context.Background(), catalog.AuditFilter{Action: action}, func(*catalog.AuditRecord) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
