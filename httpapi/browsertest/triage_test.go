package browsertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
)

// TestConsoleTriageInBrowser drives the triage forms in headless Chromium
// as an operator: open the groups by fingerprint, triage the gateway
// timeouts' group as a known issue (a bad ticket is refused, naming the
// field), see the status inherited on one of its entries, and assign that
// entry with a note. The catalog and the audit log hold what the forms
// did. It skips loudly without Chromium, except under CI=true.
func TestConsoleTriageInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx := context.Background()
	var fp string
	var sample int64
	groups, err := f.Catalog.Group(ctx, "fingerprint", catalog.Filter{Queue: "orders.created", States: catalog.HeldStates})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if strings.Contains(g.Key, "gateway timeout") {
			fp, sample = g.Key, g.SampleID
		}
	}
	if fp == "" {
		t.Fatalf("no gateway timeout group in %+v", groups)
	}
	b.do("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	b.do("open the groups by fingerprint",
		chromedp.Navigate(f.ts.URL+"/#/groups?queue=orders.created&by=fingerprint"),
		chromedp.WaitVisible(chromedp.Search(`//tr[contains(@data-key, "gateway timeout")]//a[@class="triage-link"]`)),
	)
	if cell := b.text(`table.groups tbody tr td.triage-cell`); !strings.Contains(cell, "untriaged") {
		t.Errorf("triage cell before: %q", cell)
	}
	b.do("open the group's triage",
		chromedp.Click(chromedp.Search(`//tr[contains(@data-key, "gateway timeout")]//a[@class="triage-link"]`)),
		chromedp.WaitVisible(chromedp.ID("triage-group-save")),
	)
	if got := b.text("#triage-fingerprint"); got != fp {
		t.Errorf("the page triages %q, want %q", got, fp)
	}
	b.do("a ticket that is not http(s) is refused",
		chromedp.SetValue(chromedp.ID("triage-group-status"), "known_issue"),
		chromedp.SetValue(chromedp.ID("triage-group-ticket"), "ftp://tracker.example.com/PAY-9"),
		chromedp.Click(chromedp.ID("triage-group-save")),
		chromedp.WaitVisible(chromedp.CSS(`#triage-group-result .notice.error`)),
	)
	if msg := b.text(`#triage-group-result`); !strings.Contains(msg, "want an http:// or https:// URL") || !strings.Contains(msg, "(ticket)") {
		t.Errorf("refusal shows %q", msg)
	}
	if ts, err := f.Catalog.GroupTriages(ctx, ""); err != nil || len(ts) != 0 {
		t.Fatalf("a refused triage changed the catalog: %v, %v", ts, err)
	}
	b.do("triage the group as a known issue",
		chromedp.SetValue(chromedp.ID("triage-group-ticket"), "https://tracker.example.com/PAY-9"),
		chromedp.SetValue(chromedp.ID("triage-group-assign"), "otto"),
		chromedp.SetValue(chromedp.ID("triage-group-note"), "gateway vendor incident, accepted until Friday"),
		chromedp.Click(chromedp.ID("triage-group-save")),
		chromedp.WaitVisible(chromedp.Search(`//section[contains(@class, "triage-record")]//dd[text()="known_issue"]`)),
	)
	g, err := f.Catalog.GroupTriage(ctx, "orders.created", fp)
	if err != nil || g == nil || g.Status != catalog.TriageKnownIssue || g.Ticket != "https://tracker.example.com/PAY-9" || g.Assignee != "otto" ||
		g.UpdatedBy != "otto" || len(g.Notes) != 1 || g.Notes[0].Note != "gateway vendor incident, accepted until Friday" {
		t.Fatalf("group triage in the catalog: %+v, %v", g, err)
	}
	if notes := b.text(`section.triage-record ol.notes`); !strings.Contains(notes, "otto") || !strings.Contains(notes, "accepted until Friday") {
		t.Errorf("notes shown: %q", notes)
	}

	// One of its entries inherits the status; assign it with a note.
	b.do("open an entry of the group",
		chromedp.Navigate(fmt.Sprintf("%s/#/entry/%d", f.ts.URL, sample)),
		chromedp.WaitVisible(chromedp.ID("triage-entry-save")),
	)
	if st := b.text("#triage-status"); !strings.Contains(st, "known_issue") || !strings.Contains(st, "from its group") {
		t.Errorf("entry triage status %q", st)
	}
	b.do("assign the entry",
		chromedp.SetValue(chromedp.ID("triage-entry-assign"), "ada"),
		chromedp.SetValue(chromedp.ID("triage-entry-note"), "customer asked for a refund, keep it"),
		chromedp.Click(chromedp.ID("triage-entry-save")),
		chromedp.WaitVisible(chromedp.Search(`//section[contains(@class, "triage-record") and contains(@class, "entry")]//dd[text()="ada"]`)),
	)
	e, err := f.Catalog.Get(ctx, sample)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := f.Catalog.EntryTriage(ctx, e)
	if err != nil || tr.Entry == nil || tr.Entry.Assignee != "ada" || tr.Entry.Status != "" || tr.Status != catalog.TriageKnownIssue ||
		len(tr.Entry.Notes) != 1 || tr.Entry.Notes[0].Author != "otto" {
		t.Errorf("entry triage in the catalog: %+v, %v", tr, err)
	}
	// Both changes are in the audit log under the operator's name.
	n := 0
	f.Catalog.EachAudit(ctx, catalog.AuditFilter{Action: catalog.ActionTriage}, func(r *catalog.AuditRecord) error {
		if r.Actor == "otto" && r.Outcome == catalog.OutcomeTriaged {
			n++
		}
		return nil
	})
	if n != 2 {
		t.Errorf("%d triage audit records by otto, want 2", n)
	}
	f.Conserved()
}
