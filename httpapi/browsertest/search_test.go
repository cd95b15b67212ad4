package browsertest

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleSearchInBrowser drives the console's search in headless
// Chromium: log in as an operator, search words of error messages, narrow
// by a body field (where), open a hit, and find the export link of the
// filters. It skips loudly without Chromium, except under CI=true, where
// it fails.
func TestConsoleSearchInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx, step, textOf := b.ctx, b.do, b.text
	step("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	step("open the search",
		chromedp.Click(chromedp.CSS(`a[href="#/search"]`)),
		chromedp.WaitVisible(chromedp.ID("s-q")),
	)
	step("search error messages",
		chromedp.SendKeys(chromedp.ID("s-q"), "gateway timeout"),
		chromedp.Click(chromedp.ID("search-submit")),
		chromedp.WaitVisible(chromedp.CSS(`table.search tbody tr`)),
	)
	if got := textOf("#search-count"); !strings.HasPrefix(got, "4 entries match") {
		t.Errorf("search count %q, want 4", got)
	}
	if marked := textOf("table.search tbody tr mark"); !strings.EqualFold(marked, "gateway") {
		t.Errorf("first highlighted match %q, want gateway", marked)
	}
	step("narrow by a body field",
		chromedp.SetValue(chromedp.ID("s-where"), `.amount_cents >= 1008`),
		chromedp.Click(chromedp.ID("search-submit")),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="search-count" and starts-with(text(), "2 entries match")]`)),
	)
	if rows := textOf("table.search tbody"); !strings.Contains(rows, "orders.created") || strings.Contains(rows, "payments") {
		t.Errorf("hits with where:\n%s", rows)
	}
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("export-link"), "href"))
	if err != nil || !strings.Contains(href.Value, "/api/export?") || !strings.Contains(href.Value, "where=") {
		t.Errorf("export link %q, %v", href.Value, err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#import-form").length`)); err != nil || n != 0 {
		t.Errorf("an operator sees the import form (%d, %v): import is admin only", n, err)
	}
	step("a bad where names the column",
		chromedp.SetValue(chromedp.ID("s-where"), `.amount_cents = 1`),
		chromedp.Click(chromedp.ID("search-submit")),
		chromedp.WaitVisible(chromedp.Search(`//p[@role="alert" and contains(text(), "is not an operator")]`)),
	)
	step("open a hit",
		chromedp.Navigate(f.ts.URL+"/#/search?q=gateway"),
		chromedp.WaitVisible(chromedp.CSS(`table.search tbody tr a`)),
		chromedp.Click(chromedp.CSS(`table.search tbody tr a`)),
		chromedp.WaitVisible(chromedp.Search(`//h1[starts-with(text(), "Entry")]`)),
	)
	f.Conserved()
}
