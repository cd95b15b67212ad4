package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/entryview"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/redrive"
)

func TestReadRoutes(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		f := mk(t, nil, func(o *Options) {
			reg.MustRegister(lilyprom.NewCatalogCollector(o.Store, o.InFlight, lilyprom.CatalogOptions{}))
			o.Metrics = lilyprom.Handler(reg)
		})

		var health healthJSON
		if code := f.call("GET", "/healthz", nil, nil, &health); code != http.StatusOK || health.Status != "degraded" {
			t.Fatalf("healthz: %d %+v, want 200 degraded", code, health)
		}
		if len(health.Reasons) != 2 || !strings.Contains(health.Reasons[0], "orders.created: 10 dead letters held") {
			t.Errorf("health reasons = %q", health.Reasons)
		}

		var queues struct{ Queues []queueJSON }
		if code := f.call("GET", "/api/queues", nil, nil, &queues); code != http.StatusOK || len(queues.Queues) != 2 {
			t.Fatalf("queues: %d %+v", code, queues)
		}
		q := queues.Queues[0]
		if q.Queue.Queue != "orders.created" || q.Depth != 10 || q.Owner != "team-checkout" || q.RetentionHours != 72 || q.Oldest == nil ||
			len(q.Inflow) != inflowBuckets || q.PastDeadline {
			t.Errorf("orders.created = %+v", q)
		}
		var sum int64
		for _, n := range q.Inflow {
			sum += n
		}
		if sum != 10 || q.Inflow[inflowBuckets-1] == 0 {
			t.Errorf("inflow %v: want the 10 entries, the newest in the last bucket", q.Inflow)
		}

		var entries struct {
			Entries     []entrySummary
			NextAfterID int64 `json:"next_after_id"`
		}
		if code := f.call("GET", "/api/entries?queue=orders.created&reason=permanent&limit=4", nil, nil, &entries); code != http.StatusOK ||
			len(entries.Entries) != 4 || entries.NextAfterID == 0 {
			t.Fatalf("entries page 1: %d %+v", code, entries)
		}
		after := entries.NextAfterID
		entries.NextAfterID = 0
		f.call("GET", "/api/entries?queue=orders.created&reason=permanent&limit=4&after_id="+itoa(after), nil, nil, &entries)
		if len(entries.Entries) != 2 || entries.NextAfterID != 0 {
			t.Errorf("entries page 2: %+v", entries)
		}

		var e entryview.Entry
		if code := f.call("GET", "/api/entries/"+itoa(entries.Entries[0].ID)+"?body=text", nil, nil, &e); code != http.StatusOK {
			t.Fatalf("entry: %d", code)
		}
		if e.Evidence.Lily.ErrorType != "*json.SyntaxError" || e.Body.Format != "text" || e.Evidence.Lily.ConsumerVersion != "1.4.2" {
			t.Errorf("entry = %+v", e)
		}
		var pay struct{ Entries []entrySummary }
		f.call("GET", "/api/entries?queue=payments.captured", nil, nil, &pay)
		f.call("GET", "/api/entries/"+itoa(pay.Entries[0].ID), nil, nil, &e)
		if len(e.Evidence.Foreign) != 1 || e.Evidence.Foreign[0].Reason != "delivery_limit" || e.Body.Format != "hex" {
			t.Errorf("foreign evidence / hex body: %+v %+v", e.Evidence.Foreign, e.Body)
		}

		var groups struct {
			By     string
			Total  int64
			Groups []catalog.Group
		}
		f.call("GET", "/api/groups?by=fingerprint&queue=orders.created", nil, nil, &groups)
		if groups.Total != 10 || len(groups.Groups) != 2 || groups.Groups[0].Count != 6 || groups.Groups[0].SampleID == 0 {
			t.Errorf("groups by fingerprint = %+v", groups)
		}

		var ledger struct{ Balanced bool }
		if f.call("GET", "/api/ledger", nil, nil, &ledger); !ledger.Balanced {
			t.Error("ledger does not balance")
		}

		resp, err := http.Get(f.ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		for _, want := range []string{`lily_dlq_entries{queue="orders.created",state="pending"} 10`, "lily_dlq_oldest_entry_age_seconds", "lily_ledger_unaccounted"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		f.Conserved()
	})
}

func TestBadInputNamesTheField(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tests := []struct {
		method, path string
		body         any
		field        string
		status       int
	}{
		{"GET", "/api/entries?older_than=yesterday", nil, "older_than", 400},
		{"GET", "/api/entries?state=lost", nil, "state", 400},
		{"GET", "/api/entries?limit=0", nil, "limit", 400},
		{"GET", "/api/entries?ids=1,x", nil, "ids", 400},
		{"GET", "/api/entries/abc", nil, "id", 400},
		{"GET", "/api/entries/999999", nil, "id", 404},
		{"GET", "/api/entries/1?body=pdf", nil, "body", 400},
		{"GET", "/api/groups?by=color", nil, "by", 400},
		{"GET", "/api/audit?action=delete", nil, "action", 400},
		{"GET", "/api/audit?since=soon", nil, "since", 400},
		{"POST", "/api/redrives", map[string]any{"sample": 2}, "observe", 400},
		{"POST", "/api/redrives", map[string]any{"observe": "1s"}, "sample", 400},
		{"POST", "/api/redrives", map[string]any{"rate": -1}, "rate", 400},
		{"POST", "/api/redrives", map[string]any{"filter": map[string]any{"quue": "x"}}, "body", 400},
		{"POST", "/api/discard", map[string]any{"filter": map[string]any{"queue": "orders.created"}}, "reason", 400},
		{"POST", "/api/discard", map[string]any{"reason": "x", "filter": map[string]any{"state": "redriven"}}, "filter.state", 400},
		{"POST", "/api/erase", map[string]any{}, "key", 400},
		{"GET", "/api/redrives/nope", nil, "id", 404},
	}
	before := f.States()
	for _, tc := range tests {
		var e apiError
		code := f.call(tc.method, tc.path, nil, tc.body, &e)
		if code != tc.status || e.Field != tc.field || e.Error == "" {
			t.Errorf("%s %s %v: %d %+v, want %d naming %q", tc.method, tc.path, tc.body, code, e, tc.status, tc.field)
		}
	}
	if after := f.States(); !equalCounts(before, after) {
		t.Errorf("bad requests changed the catalog: %v -> %v", before, after)
	}
}

func TestRedriveJob(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		hook, err := lilyprom.NewHook(reg)
		if err != nil {
			t.Fatal(err)
		}
		f := mk(t, allTokens, func(o *Options) { o.Redrives = hook })
		sel := map[string]any{"queue": "orders.created", "reason": "retries_exhausted"}

		var plan dryRunAnswer
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "dry_run": true}, &plan); code != http.StatusOK {
			t.Fatalf("dry run: %d", code)
		}
		if plan.Selected != 4 || plan.Redriven != 3 || plan.NeedsManual != 1 || len(plan.Entries) != 4 {
			t.Errorf("plan = %+v", plan)
		}
		if st := f.States(); st["pending"] != 13 {
			t.Fatalf("the dry run changed states: %v", st)
		}

		f.Consume("orders.created") // the fixed consumer acks the sample
		var j jobJSON
		code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "sample": 1, "observe": "1m", "rate": 100}, &j)
		if code != http.StatusAccepted || j.ID == 0 || j.Total != 4 || j.Queue != "orders.created" {
			t.Fatalf("start: %d %+v", code, j)
		}
		j = f.waitJob(j.ID, &viewerToken)
		if j.State != redrive.JobDone || j.Redriven != 3 || j.NeedsManual != 1 || j.Failed != 0 || j.Done != 4 || len(j.Sampled) != 1 || !j.SampleClean {
			t.Errorf("job = %+v", j)
		}
		st := f.States()
		if st["redriven"] != 3 || st["needs_manual"] != 1 || st["pending"] != 9 {
			t.Errorf("states after the redrive: %v", st)
		}
		var audit struct{ Records []catalog.AuditRecord }
		f.call("GET", "/api/audit?op="+j.Op, &viewerToken, nil, &audit)
		outcomes := map[string]bool{}
		for _, r := range audit.Records {
			if r.Actor != "otto" {
				t.Errorf("audit record by %q, want the token's name otto: %+v", r.Actor, r)
			}
			outcomes[r.Outcome] = true
		}
		for _, want := range []string{catalog.OutcomeRedriven, catalog.OutcomeNeedsManual, catalog.OutcomeObserved} {
			if !outcomes[want] {
				t.Errorf("no %s record in the job's audit: %+v", want, audit.Records)
			}
		}
		var jobs struct{ Redrives []jobJSON }
		if f.call("GET", "/api/redrives", &viewerToken, nil, &jobs); len(jobs.Redrives) != 1 {
			t.Errorf("jobs = %+v", jobs)
		}
		if body := scrape(t, reg); !strings.Contains(body, `lily_redrive_total{outcome="redriven",queue="orders.created"} 3`) {
			t.Errorf("redrive metric not counted:\n%s", body)
		}
		f.Conserved()
	})
}

func TestRedriveJobFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, func(o *Options) {
		o.Target = func(context.Context, string) (redrive.Publisher, error) { return failing{}, nil }
	})
	var j jobJSON
	f.call("POST", "/api/redrives", nil, map[string]any{"filter": map[string]any{"queue": "payments.captured"}, "include_crashers": true}, &j)
	j = f.waitJob(j.ID, nil)
	if j.State != redrive.JobFailed || j.Failed != 3 || j.Redriven != 0 || !strings.Contains(j.Error, "broker said no") {
		t.Errorf("job = %+v", j)
	}
	if st := f.States(); st["pending"] != 13 {
		t.Errorf("a failed redrive changed states: %v", st)
	}
	f.Conserved()
}

func TestDecisions(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		var ans decideAnswer
		sel := map[string]any{"queue": "orders.created", "reason": "permanent"}
		if code := f.call("POST", "/api/discard", &operatorToken, map[string]any{"filter": sel, "reason": "malformed", "dry_run": true}, &ans); code != 200 || ans.Count != 6 {
			t.Fatalf("discard dry run: %d %+v", code, ans)
		}
		if st := f.States(); st["discarded"] != 0 {
			t.Fatalf("dry run discarded: %v", st)
		}
		if code := f.call("POST", "/api/discard", &operatorToken, map[string]any{"filter": sel, "reason": "malformed", "limit": 5}, &ans); code != 200 || ans.Count != 5 || len(ans.Entries) != 5 {
			t.Fatalf("discard: %d %+v", code, ans)
		}
		if code := f.call("POST", "/api/erase", &adminToken, map[string]any{"key": "customer-1", "reason": "GDPR-42"}, &ans); code != 200 || ans.Count == 0 {
			t.Fatalf("erase: %d %+v", code, ans)
		}
		if code := f.call("POST", "/api/expire", &adminToken, map[string]any{"dry_run": true}, &ans); code != 200 || ans.Count != 0 {
			t.Fatalf("expire: %d %+v", code, ans)
		}
		var audit struct{ Records []catalog.AuditRecord }
		f.call("GET", "/api/audit?action=erase", &viewerToken, nil, &audit)
		if len(audit.Records) == 0 || audit.Records[0].Actor != "ada" || !strings.Contains(audit.Records[0].Detail, "GDPR-42") {
			t.Errorf("erase audit = %+v", audit.Records)
		}
		var erased entryview.Entry
		f.call("GET", "/api/entries/1", &adminToken, nil, &erased)
		var hist struct{ Records []catalog.AuditRecord }
		f.call("GET", "/api/audit?event_id="+erased.EventID, &viewerToken, nil, &hist)
		if len(hist.Records) == 0 {
			t.Errorf("no audit history for %s", erased.EventID)
		}
		f.Conserved()
	})
}

func TestViewerBodiesMasked(t *testing.T) {
	t.Parallel()
	shower := Token{Name: "sam", Role: "viewer", Secret: "show-bodies-0123456789", ShowBodies: true}
	f := newFixture(t, append([]Token{shower}, allTokens...))
	for _, tc := range []struct {
		tok  *Token
		want string
	}{{&viewerToken, "masked"}, {&shower, "json"}, {&operatorToken, "json"}} {
		var e entryview.Entry
		f.call("GET", "/api/entries/7", tc.tok, nil, &e)
		if e.Body.Format != tc.want || (tc.want == "masked" && e.Body.Value != nil) {
			t.Errorf("%s sees body %+v, want %s", tc.tok.Name, e.Body, tc.want)
		}
	}
}

type fakeParker struct{ unparked []string }

func (p *fakeParker) Parked(context.Context, string) ([]ParkedKey, error) {
	return []ParkedKey{{Queue: "orders.created", Key: "customer-1", Messages: 3}}, nil
}

func (p *fakeParker) Unpark(_ context.Context, queue, key string, dryRun bool, actor string) (UnparkResult, error) {
	if key != "customer-1" {
		return UnparkResult{}, catalog.ErrNotFound
	}
	p.unparked = append(p.unparked, actor+":"+queue+"/"+key)
	return UnparkResult{Op: "op", Queue: queue, Key: key, DryRun: dryRun, Redriven: 3}, nil
}

func TestParkedRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, allTokens)
	var e apiError
	var parked struct{ Parked []ParkedKey }
	if code := f.call("GET", "/api/parked", &viewerToken, nil, &parked); code != 200 || len(parked.Parked) != 0 {
		t.Errorf("parked with nothing held: %d %+v", code, parked)
	}
	// The catalog itself is the default Parker: customer-0's head is the
	// pending entry orders-00.
	if err := redrive.NewKeys(f.Catalog).HoldKey(ctx, "orders.created", "customer-0", redrive.KeyModePark, redrive.KeyHeld, "orders-00"); err != nil {
		t.Fatal(err)
	}
	var health healthJSON
	if code := f.call("GET", "/healthz", nil, nil, &health); code != 200 || health.Status != "degraded" || !strings.Contains(strings.Join(health.Reasons, "\n"), `key "customer-0" parked`) {
		t.Errorf("healthz with a parked key: %d %+v", code, health)
	}
	if code := f.call("GET", "/api/parked?queue=orders.created", &viewerToken, nil, &parked); code != 200 || len(parked.Parked) != 1 ||
		parked.Parked[0].Key != "customer-0" || parked.Parked[0].HeadEventID != "orders-00" || parked.Parked[0].EntryID == 0 || parked.Parked[0].Mode != "park" {
		t.Errorf("parked: %d %+v", code, parked)
	}
	var res UnparkResult
	if code := f.call("POST", "/api/queues/orders.created/parked/customer-0/unpark", &operatorToken, map[string]any{"dry_run": true}, &res); code != 200 ||
		!res.DryRun || res.Action != "redrive_head" || res.Messages != 1 || res.Redriven != 0 {
		t.Errorf("unpark dry run: %d %+v", code, res)
	}
	if code := f.call("POST", "/api/queues/orders.created/parked/customer-0/unpark", &operatorToken, nil, &res); code != 200 || res.Redriven != 1 {
		t.Errorf("unpark: %d %+v", code, res)
	}
	if e, err := f.Catalog.Get(ctx, parked.Parked[0].EntryID); err != nil || e.State != catalog.StateRedriven || e.DecidedBy != "otto" {
		t.Errorf("head after unpark = %+v (%v), want redriven by otto", e, err)
	}
	if code := f.call("POST", "/api/queues/orders.created/parked/nobody/unpark", &operatorToken, nil, &e); code != http.StatusNotFound {
		t.Errorf("unpark of a key that is not held: %d %+v", code, e)
	}
	f.Conserved()

	// Another Parker can be plugged in.
	p := &fakeParker{}
	f = newFixture(t, allTokens, func(o *Options) { o.Parker = p })
	parked.Parked = nil
	if code := f.call("GET", "/api/parked", &viewerToken, nil, &parked); code != 200 || len(parked.Parked) != 1 {
		t.Errorf("parked: %d %+v", code, parked)
	}
	res = UnparkResult{}
	if code := f.call("POST", "/api/queues/orders.created/parked/customer-1/unpark", &operatorToken, map[string]any{"dry_run": true}, &res); code != 200 || !res.DryRun || res.Redriven != 3 {
		t.Errorf("unpark: %d %+v", code, res)
	}
	if code := f.call("POST", "/api/queues/orders.created/parked/nobody/unpark", &operatorToken, nil, &e); code != http.StatusNotFound {
		t.Errorf("unpark of an unknown key: %d", code)
	}
	if len(p.unparked) != 1 || p.unparked[0] != "otto:orders.created/customer-1" {
		t.Errorf("unparked = %v", p.unparked)
	}
}
