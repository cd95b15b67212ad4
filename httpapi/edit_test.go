package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/consoletest"
	"github.com/lily-mq/lily/internal/entryview"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/redrive/rules"
	"github.com/lily-mq/lily/transport"
)

// editorToken is an operator who may edit orders.created.
var editorToken = Token{Name: "edith", Role: config.RoleOperator, Secret: "editor-secret-0123456789", EditQueues: []string{"orders.created"}}

// jsonQueues declares orders.created as JSON.
func jsonQueues(o *Options) { consoletest.JSONQueues(&o.Config) }

func TestEditNeedsTheEditorPermission(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, append(allTokens, editorToken), jsonQueues)
		const id = 7 // orders.created, retries_exhausted, a JSON body
		good := `{"order_id":"o-6","amount_cents":1006,"currency":"EUR"}`
		req := map[string]any{"body": good, "reason": "currency was missing", "confirm": "7"}
		// Viewer: the role. Operator and admin: no edit_queues. The editor
		// on another queue's entry (11: payments.captured).
		for _, c := range []struct {
			tok  Token
			id   string
			want string
		}{{viewerToken, "7", "needs the operator role"}, {operatorToken, "7", "may not edit entries of queue orders.created"},
			{adminToken, "7", "a role alone never does"}, {editorToken, "11", "may not edit entries of queue payments.captured"}} {
			var e apiError
			if code := f.call("POST", "/api/entries/"+c.id+"/edit", &c.tok, req, &e); code != http.StatusForbidden || !strings.Contains(e.Error, c.want) {
				t.Errorf("%s on %s: %d %+v", c.tok.Name, c.id, code, e)
			}
		}
		refused := 0
		_ = f.Catalog.EachAudit(context.Background(), catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
			if r.Action == catalog.ActionRefused && strings.Contains(r.Selector, `"attempted":"edit"`) {
				refused++
			}
			return nil
		})
		if refused != 4 {
			t.Errorf("%d audited refusals, want 4", refused)
		}
		// Field errors: confirm, JSON, reason.
		for field, body := range map[string]map[string]any{
			"confirm": {"body": good, "reason": "x", "confirm": "8"},
			"body":    {"body": `{"order_id":`, "reason": "x", "confirm": "7"},
			"reason":  {"body": good, "reason": " ", "confirm": "7"},
		} {
			var e apiError
			if code := f.call("POST", "/api/entries/7/edit", &editorToken, body, &e); code != http.StatusBadRequest || e.Field != field {
				t.Errorf("bad %s: %d %+v", field, code, e)
			}
		}
		// A dry run shows the diff and stores nothing.
		var dry editAnswer
		if code := f.call("POST", "/api/entries/7/edit", &editorToken, map[string]any{"body": good, "reason": "x", "confirm": "7", "dry_run": true}, &dry); code != http.StatusOK ||
			!dry.DryRun || dry.Version != 1 || !strings.Contains(dry.Diff, `+  "currency": "EUR"`) {
			t.Fatalf("dry run: %d %+v", code, dry)
		}
		if vs, _ := f.Catalog.Versions(context.Background(), id); len(vs) != 1 {
			t.Fatalf("the dry run stored a version: %d", len(vs))
		}
		var res editAnswer
		if code := f.call("POST", "/api/entries/7/edit", &editorToken, req, &res); code != http.StatusOK || res.Version != 1 || res.EditedBy != "edith" ||
			res.Current.BodySHA256 == res.Previous.BodySHA256 {
			t.Fatalf("edit: %d %+v", code, res)
		}
		var v entryview.Entry
		if code := f.call("GET", "/api/entries/7", &editorToken, nil, &v); code != http.StatusOK || len(v.Versions) != 2 || v.Versions[1].EditedBy != "edith" ||
			!strings.Contains(v.Versions[1].Diff, "currency") {
			t.Fatalf("entry versions: %d %+v", code, v.Versions)
		}
		if code := f.call("GET", "/api/entries/7", &viewerToken, nil, &v); code != http.StatusOK || v.Versions[1].Body.Format != "masked" || strings.Contains(v.Versions[1].Diff, "currency") {
			t.Fatalf("viewer sees: %+v", v.Versions)
		}
		// The redrive sends the edited body, saying who edited it.
		var j jobJSON
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": map[string]any{"ids": []int64{id}}}, &j); code != http.StatusAccepted && code != http.StatusOK {
			t.Fatalf("redrive: %d %+v", code, j)
		}
		if j = f.waitJob(j.ID, &operatorToken); j.State != redrive.JobDone || j.Redriven != 1 {
			t.Fatalf("job %+v", j)
		}
		ds, err := f.Broker.Receive(context.Background(), &transport.ReceiveParams{Queue: "orders.created", Max: 10, Consumer: "t", Wait: time.Second})
		if err != nil || len(ds) != 1 {
			t.Fatalf("received %d, %v", len(ds), err)
		}
		d := ds[0]
		if string(d.Message.Body) != good || d.Message.Headers[evidence.HeaderEditedBy] != "edith" || d.Message.Headers[evidence.HeaderEditedVersion] != int32(1) {
			t.Fatalf("redriven %s %v", d.Message.Body, d.Message.Headers)
		}
		if err := f.Broker.Settle(context.Background(), &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
			t.Fatal(err)
		}
		f.Conserved()
	})
}

func TestEditRefusedInLocalMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var e apiError
	if code := f.call("POST", "/api/entries/7/edit", nil, map[string]any{"body": "{}", "reason": "x", "confirm": "7"}, &e); code != http.StatusForbidden ||
		!strings.Contains(e.Error, "no token edits in local mode") {
		t.Fatalf("local: %d %+v", code, e)
	}
}

func TestCheckTokensRefusesAViewerEditor(t *testing.T) {
	t.Parallel()
	tok := viewerToken
	tok.EditQueues = []string{"*"}
	if err := CheckTokens([]Token{tok}); err == nil || !strings.Contains(err.Error(), "a viewer cannot edit") {
		t.Fatalf("CheckTokens = %v", err)
	}
}

func TestRulesAPIShowsWhatEachRuleWouldDo(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		zero := 0
		f := mk(t, allTokens, func(o *Options) {
			o.Config.RedriveRules = []config.RedriveRuleConfig{{Name: "after-outage", Queue: "orders.created", When: config.TriggerBreakerClosed,
				Lookback: "24h", Sample: &zero}}
		})
		ctx := context.Background()
		now := time.Now()
		if err := rules.New(f.Catalog).RecordBreaker(ctx, "orders.created", "w1", "", "open", now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := rules.New(f.Catalog).RecordBreaker(ctx, "orders.created", "w1", "half_open", "closed", now); err != nil {
			t.Fatal(err)
		}
		var v RulesView
		if code := f.call("GET", "/api/rules", &viewerToken, nil, &v); code != http.StatusOK || len(v.Plans) != 1 {
			t.Fatalf("rules: %d %+v", code, v)
		}
		// orders.created holds 4 retries_exhausted entries, one at
		// max_redrives: the plan counts the pending ones in the window;
		// the 6 permanent entries are never in it.
		if p := v.Plans[0]; p.Fired || p.Selected != 4 || !strings.Contains(p.Selector, "retries_exhausted") {
			t.Fatalf("plan %+v", p)
		}
		if js, _ := redrive.New(f.Catalog).Jobs(ctx, redrive.JobQuery{}); len(js) != 0 {
			t.Fatalf("GET /api/rules made a job")
		}
	})
}
