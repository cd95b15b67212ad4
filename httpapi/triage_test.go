package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/entryview"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// POST /api/triage on entries and groups, on both stores: bad input is a
// 400 naming the field; a viewer is refused (403, audited); the triage
// shows in the entry, the groups and the queues; a group marked
// known_issue quiets /healthz for its fingerprint only.
func TestTriageAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		ctx := context.Background()
		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"filter": map[string]any{"ids": []int{1}}, "status": "fixed"}, "status"},
			{map[string]any{"filter": map[string]any{"ids": []int{1}}, "ticket": "ftp://x/1"}, "ticket"},
			{map[string]any{"filter": map[string]any{"ids": []int{1}}}, "status"}, // nothing to change
			{map[string]any{"note": "x"}, "filter"},                               // neither filter nor group
			{map[string]any{"filter": map[string]any{}, "note": "x"}, "filter"},   // the whole catalog
			{map[string]any{"group": map[string]any{"fingerprint": "nope"}, "note": "x"}, "group.queue"},
			{map[string]any{"filter": map[string]any{"ids": []int{1}}, "assign": "a\u001b[2J"}, "assign"},
		} {
			var e apiError
			if code := f.call("POST", "/api/triage", &operatorToken, tc.body, &e); code != http.StatusBadRequest || e.Field != tc.field {
				t.Errorf("%v: %d %+v, want 400 on %s", tc.body, code, e, tc.field)
			}
		}
		var e apiError
		if code := f.call("POST", "/api/triage", &viewerToken, map[string]any{"filter": map[string]any{"ids": []int{1}}, "note": "x"}, &e); code != http.StatusForbidden || e.Field != "role" {
			t.Errorf("viewer: %d %+v", code, e)
		}

		// An entry: assignee, status, ticket, note.
		var ans triageAnswer
		if code := f.call("POST", "/api/triage", &operatorToken, map[string]any{"filter": map[string]any{"ids": []int{7}}, "assign": "otto",
			"status": "needs_fix", "ticket": "https://tracker.example.com/PAY-9", "note": "gateway timeouts since 09:40"}, &ans); code != http.StatusOK ||
			ans.Count != 1 || ans.Target != "entries" || len(ans.Entries) != 1 || ans.Entries[0].ID != 7 {
			t.Fatalf("triage entry: %d %+v", code, ans)
		}
		var v entryview.Entry
		if code := f.call("GET", "/api/entries/7", &viewerToken, nil, &v); code != http.StatusOK || v.Triage == nil || v.Triage.Status != "needs_fix" ||
			v.Triage.Entry.Assignee != "otto" || len(v.Triage.Entry.Notes) != 1 || v.Triage.Entry.Notes[0].Author != "otto" {
			t.Errorf("entry 7: %d %+v", code, v.Triage)
		}

		// Both groups of orders.created are known issues: its alarm goes quiet.
		var gs struct {
			Groups []catalog.Group `json:"groups"`
		}
		if code := f.call("GET", "/api/groups?by=fingerprint&queue=orders.created", &viewerToken, nil, &gs); code != http.StatusOK || len(gs.Groups) != 2 {
			t.Fatalf("groups: %d %+v", code, gs)
		}
		for _, g := range gs.Groups {
			if code := f.call("POST", "/api/triage", &operatorToken, map[string]any{"group": map[string]any{"queue": "orders.created", "fingerprint": g.Key},
				"status": "known_issue", "note": "accepted until the 4.2 release"}, &ans); code != http.StatusOK || ans.Target != "group" || ans.Count != int(g.Count) {
				t.Fatalf("triage group %s: %d %+v", g.Key, code, ans)
			}
		}
		if code := f.call("GET", "/api/groups?by=fingerprint&queue=orders.created", &viewerToken, nil, &gs); code != http.StatusOK ||
			len(gs.Groups[0].Triage) != 1 || gs.Groups[0].Triage[0].Status != "known_issue" || gs.Groups[0].Triage[0].UpdatedBy != "otto" {
			t.Errorf("groups after triage: %d %+v", code, gs.Groups)
		}
		var health healthJSON
		f.call("GET", "/healthz", nil, nil, &health)
		reasons := strings.Join(health.Reasons, "\n")
		// Entry 7's own status (needs_fix) wins over its group's known_issue.
		if health.Status != "degraded" || !strings.Contains(reasons, "queue orders.created: 1 dead letters held") ||
			!strings.Contains(reasons, "besides 9 of groups triaged known_issue") || !strings.Contains(reasons, "queue payments.captured: 3 dead letters held") {
			t.Errorf("healthz with orders.created known: %+v", health)
		}
		var qs struct {
			Queues []queueJSON `json:"queues"`
		}
		if code := f.call("GET", "/api/queues", &viewerToken, nil, &qs); code != http.StatusOK || qs.Queues[0].Queue.Queue != "orders.created" ||
			qs.Queues[0].KnownIssue != 9 || qs.Queues[0].Alarming != 1 {
			t.Errorf("queues: %d %+v", code, qs.Queues)
		}
		if code := f.call("POST", "/api/triage", &operatorToken, map[string]any{"filter": map[string]any{"ids": []int{7}}, "status": ""}, &ans); code != http.StatusOK {
			t.Fatalf("clear the status: %d", code)
		}
		f.call("GET", "/healthz", nil, nil, &health)
		if strings.Contains(strings.Join(health.Reasons, "\n"), "queue orders.created") || health.Status != "degraded" {
			t.Errorf("healthz after clearing entry 7's status: %+v", health)
		}
		// A new fingerprint alarms.
		h := transport.Headers{}
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "schema v5 unknown", DeadLetteredAt: time.Now()}.Apply(h)
		if err := f.Catalog.Insert(ctx, catalog.NewEntry("orders.created", transport.Message{EventID: "orders-new", Body: []byte("{}")}, h, "", time.Now())); err != nil {
			t.Fatal(err)
		}
		if err := ledger.New(f.Catalog).AddCounts(ctx, "orders.created", 1, 0); err != nil { // accepted, as its transport counts it
			t.Fatal(err)
		}
		f.call("GET", "/healthz", nil, nil, &health)
		if !strings.Contains(strings.Join(health.Reasons, "\n"), "queue orders.created: 1 dead letters held") ||
			!strings.Contains(strings.Join(health.Reasons, "\n"), "besides 10 of groups triaged known_issue") {
			t.Errorf("healthz with a new fingerprint: %+v", health)
		}
		// Every change, and the refusal, is audited.
		triaged, refused := 0, 0
		f.Catalog.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
			switch {
			case r.Action == catalog.ActionTriage && r.Actor == "otto":
				triaged++
			case r.Action == catalog.ActionRefused && r.Actor == "vera" && strings.Contains(r.Selector, "/api/triage"):
				refused++
			}
			return nil
		})
		if triaged != 4 || refused != 1 {
			t.Errorf("audit: %d triage records, %d refusals; want 4 and 1", triaged, refused)
		}
		f.Conserved()
	})
}
