package browsertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/redrive/rules"
)

// TestConsoleEditInBrowser drives the guarded edit in headless Chromium:
// an editor opens an entry, edits its JSON body, sees the diff, must type
// the entry ID before the button stores the version, and finds the
// versions on the entry page; an operator without edit_queues is not
// offered the edit. It skips loudly without Chromium, except under
// CI=true, where it fails.
func TestConsoleEditInBrowser(t *testing.T) {
	b := newBrowser(t)
	zero := 0
	f := newFixture(t, append(allTokens, editorToken), jsonQueues, func(o *httpapi.Options) {
		o.Config.RedriveRules = []config.RedriveRuleConfig{{Name: "after-outage", Queue: "orders.created", When: config.TriggerBreakerClosed,
			Lookback: "24h", Sample: &zero}}
	})
	if err := rules.New(f.Catalog).RecordBreaker(context.Background(), "orders.created", "w1", "", "open", time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := rules.New(f.Catalog).RecordBreaker(context.Background(), "orders.created", "w1", "half_open", "closed", time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, do, text := b.ctx, b.do, b.text
	// An operator without edit_queues: no edit link; the edit page refuses.
	do("log in as the operator",
		chromedp.Navigate(f.ts.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), operatorToken.Secret),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a.groups-link[data-queue="orders.created"]`)),
		chromedp.Navigate(f.ts.URL+"/#/entry/7"),
		chromedp.WaitVisible(chromedp.Search(`//h1[text()="Entry 7"]`)),
	)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#edit-link").length`)); err != nil || n != 0 {
		t.Fatalf("the operator is offered the edit: %d %v", n, err)
	}
	do("the operator's edit page refuses", chromedp.Navigate(f.ts.URL+"/#/edit?id=7"),
		chromedp.WaitVisible(chromedp.Search(`//*[contains(text(), "You may not edit entries of orders.created")]`)))
	do("log out", chromedp.Navigate(f.ts.URL+"/"), chromedp.WaitVisible(chromedp.Search(`//button[text()="Log out"]`)),
		chromedp.Click(chromedp.Search(`//button[text()="Log out"]`)), chromedp.WaitVisible(chromedp.ID("token")))

	do("log in as the editor and open the entry",
		chromedp.SendKeys(chromedp.ID("token"), editorToken.Secret),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a.groups-link[data-queue="orders.created"]`)),
		chromedp.Navigate(f.ts.URL+"/#/entry/7"),
		chromedp.WaitVisible(chromedp.ID("edit-link")),
		chromedp.Click(chromedp.ID("edit-link")),
		chromedp.WaitVisible(chromedp.ID("edit-body")),
	)
	do("change the body and show the diff",
		chromedp.SetValue(chromedp.ID("edit-body"), `{"order_id": "o-6", "amount_cents": 1006, "currency": "EUR"}`),
		chromedp.SendKeys(chromedp.ID("edit-reason"), "currency was missing"),
		chromedp.Click(chromedp.ID("edit-preview")),
		chromedp.WaitVisible(chromedp.ID("edit-diff")),
	)
	if d := text("#edit-diff"); !strings.Contains(d, `+  "currency": "EUR"`) || !strings.Contains(d, `-  "amount_cents": 1006`) {
		t.Errorf("diff shown:\n%s", d)
	}
	if vs, _ := f.Catalog.Versions(context.Background(), 7); len(vs) != 1 {
		t.Fatalf("the preview stored a version")
	}
	// The button stays disabled until the entry ID is typed.
	disabled := func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("confirm").disabled`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !disabled() {
		t.Fatal("confirm enabled before the ID was typed")
	}
	do("type a wrong ID", chromedp.SendKeys(chromedp.ID("edit-confirm"), "8"))
	if !disabled() {
		t.Fatal("confirm enabled by a wrong ID")
	}
	do("type the ID", chromedp.SendKeys(chromedp.ID("edit-confirm"), "\b7"))
	if disabled() {
		t.Fatal("confirm still disabled after typing the entry ID")
	}
	do("store", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("edit-stored")))
	if s := text("#edit-stored"); !strings.Contains(s, "Stored version 1 by edith") {
		t.Errorf("stored: %q", s)
	}
	vs, err := f.Catalog.Versions(context.Background(), 7)
	if err != nil || len(vs) != 2 || vs[1].EditedBy != "edith" || !strings.Contains(string(vs[1].Body), `"currency": "EUR"`) {
		t.Fatalf("versions %+v, %v", vs, err)
	}
	do("the entry shows its versions", chromedp.Navigate(f.ts.URL+"/#/entry/7"),
		chromedp.WaitVisible(chromedp.CSS(`ol.versions li[data-version="1"] pre.diff`)))
	if v := text(`ol.versions li[data-version="1"]`); !strings.Contains(v, "by edith") || !strings.Contains(v, "currency was missing") {
		t.Errorf("versions on the entry page: %q", v)
	}
	do("the edit is in the audit log", chromedp.Navigate(f.ts.URL+"/#/audit"),
		chromedp.WaitVisible(chromedp.CSS(`table.audit tr.a-edit`)))
	if a := text("table.audit tr.a-edit"); !strings.Contains(a, catalog.OutcomeEdited) || !strings.Contains(a, "edith") {
		t.Errorf("audit log's edit row: %s", a)
	}
	// The rules page shows what the rule would do now, as a dry run.
	do("the rules page", chromedp.Click(chromedp.CSS(`a[href="#/rules"]`)), chromedp.WaitVisible(chromedp.CSS(`table.rules tr[data-rule="after-outage"]`)))
	if now := text(`tr[data-rule="after-outage"] .rule-now`); now != "would redrive 4 pending entries" {
		t.Errorf("rules page: %q", now)
	}
	f.Conserved()
}
