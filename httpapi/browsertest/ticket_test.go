package browsertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
)

// TestConsoleTicketLinkOnlyHTTP (issue 37 item 2): the console renders a
// stored ticket as a link only for an http or https URL, whatever the
// catalog holds. A javascript: ticket (as an import stored it before it
// was validated) is shown as plain text, with no anchor a click could
// follow; an https ticket is a link. It skips loudly without Chromium,
// except under CI=true.
func TestConsoleTicketLinkOnlyHTTP(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx := context.Background()
	es, err := f.Catalog.List(ctx, catalog.Filter{Queue: "orders.created", States: catalog.HeldStates}, 2)
	if err != nil || len(es) != 2 {
		t.Fatalf("entries: %v %v", es, err)
	}
	ticket := "https://tracker.example.com/PAY-1"
	for _, e := range es {
		if _, err := f.Catalog.TriageEntries(ctx, catalog.TriageParams{Filter: catalog.Filter{IDs: []int64{e.ID}},
			Change: catalog.TriageChange{Ticket: &ticket}, Actor: "otto"}); err != nil {
			t.Fatal(err)
		}
	}
	// What an older import stored, past the API's validation.
	const evil = "javascript:document.title='pwned'"
	if _, err := f.Catalog.DB().ExecContext(ctx, `UPDATE lily_triage_entries SET ticket = ? WHERE entry_id = ?`, evil, es[0].ID); err != nil {
		t.Fatal(err)
	}
	b.do("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	b.do("open the entry with the stored javascript: ticket",
		chromedp.Navigate(fmt.Sprintf("%s/#/entry/%d", f.ts.URL, es[0].ID)),
		chromedp.WaitVisible(chromedp.CSS(`section.triage-record.entry .ticket-text`)),
	)
	if got := b.text(`section.triage-record.entry .ticket-text`); got != evil {
		t.Errorf("the ticket shows %q, want the stored text %q", got, evil)
	}
	anchors, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('a[href*="javascript:" i]').length`))
	if err != nil || anchors != 0 {
		t.Errorf("%d anchors with a javascript: href on the page (%v)", anchors, err)
	}
	b.do("the text is no link: clicking it does nothing",
		chromedp.Click(chromedp.CSS(`section.triage-record.entry .ticket-text`)))
	title, err := chromedp.Run(b.ctx, chromedp.Title())
	if err != nil || strings.Contains(title, "pwned") {
		t.Errorf("the stored script ran: title %q", title)
	}
	b.do("open the entry with the https ticket",
		chromedp.Navigate(fmt.Sprintf("%s/#/entry/%d", f.ts.URL, es[1].ID)),
		chromedp.WaitVisible(chromedp.CSS(`section.triage-record.entry a.ticket-link`)),
	)
	href, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("section.triage-record.entry a.ticket-link").getAttribute("href")`))
	if err != nil || href != ticket {
		t.Errorf("the https ticket links to %q (%v), want %q", href, err, ticket)
	}
	f.Conserved()
}

// TestConsoleMaskedViewerCannotQueryBodies (issue 37 item 1): a viewer
// without show_bodies is offered no body filter and no search in the
// console (the API refuses both, 403), and still reads the entries.
func TestConsoleMaskedViewerCannotQueryBodies(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	b.do("log in as the viewer", logIn(f.ts.URL, allTokens[0].Secret)...)
	b.do("open the entries", chromedp.Navigate(f.ts.URL+"/#/entries?queue=orders.created"), chromedp.WaitVisible(chromedp.ID("f-queue")))
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#f-where, #s-where').length`))
	if err != nil || n != 0 {
		t.Errorf("%d where fields offered to a viewer without show_bodies (%v)", n, err)
	}
	b.do("open the search", chromedp.Navigate(f.ts.URL+"/#/search?q=gateway"), chromedp.WaitVisible(chromedp.ID("export-link")))
	if msg := b.text("main"); !strings.Contains(msg, "your token may not read") {
		t.Errorf("the search page says %q", msg)
	}
	n, err = chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#search-form, #s-q').length`))
	if err != nil || n != 0 {
		t.Errorf("%d search inputs offered to a viewer without show_bodies (%v)", n, err)
	}
	f.Conserved()
}
