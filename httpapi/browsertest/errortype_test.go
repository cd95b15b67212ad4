package browsertest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// zoned matches a time shown with its zone ("UTC", "GMT+1", "CET").
var zoned = regexp.MustCompile(`(AM|PM|\d)\s(UTC|GMT([+-]\d{1,2}(:\d\d)?)?|[A-Z]{3,5})$`) // after the clock, not "PM" itself

// TestConsoleShowsHumanErrorTypes (issue 32 item 6): an entry whose error
// is a plain errors.New value shows "error", with Go's internal name
// (*errors.errorString) in the tooltip instead of on the page; a named
// type (*json.SyntaxError) is shown as it is; the body comes before the
// triage form; the page's times say their zone.
func TestConsoleShowsHumanErrorTypes(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx := context.Background()
	h := transport.Headers{}
	evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "order rejected by schema v3",
		Source: "sqlite/orders.created", DeadLetteredAt: time.Now()}.Apply(h)
	e := catalog.NewEntry("orders.created", transport.Message{EventID: "plain-1", Body: []byte(`{"id":1}`)}, h, "permanent", time.Now())
	if err := f.Catalog.Insert(ctx, e); err != nil {
		t.Fatal(err)
	}
	b.do("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	b.do("open the entry",
		chromedp.Navigate(fmt.Sprintf("%s/#/entry/%d", f.ts.URL, e.ID)),
		chromedp.WaitVisible(chromedp.CSS(`span.error-type`)),
		chromedp.WaitVisible(chromedp.ID("triage")),
	)
	if page := b.text("main"); !strings.Contains(page, "error: order rejected by schema v3") {
		t.Errorf("the entry page does not show the error as 'error: message':\n%s", page)
	}
	// Where the page names the error type (the entry's error, Lily's
	// evidence) it says "error"; the raw headers table below keeps the
	// header's value as stored.
	shown, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("span.error-type")].map(s => s.textContent + "|" + s.title)`))
	if err != nil || len(shown) != 2 || shown[0] != "error|*errors.errorString" || shown[1] != "error|*errors.errorString" {
		t.Errorf("error types shown %q (%v), want \"error\" with the Go type as tooltip, twice", shown, err)
	}
	// The body comes right under the entry's summary, before the triage
	// form and the evidence.
	before, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`!!(document.querySelector("pre.body").compareDocumentPosition(document.getElementById("triage")) & Node.DOCUMENT_POSITION_FOLLOWING)`))
	if err != nil || !before {
		t.Errorf("the body is not above the triage form (%v)", err)
	}
	// Every time on the page is in one format and says its zone.
	times, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("time")].map(t => t.textContent)`))
	if err != nil || len(times) == 0 {
		t.Fatalf("times on the entry page: %q (%v)", times, err)
	}
	for _, tm := range times {
		if !zoned.MatchString(tm) {
			t.Errorf("time %q does not say its zone", tm)
		}
	}
	b.do("the entries list",
		chromedp.Navigate(f.ts.URL+"/#/entries?queue=orders.created"),
		chromedp.WaitVisible(chromedp.CSS(`td span.error-type`)),
	)
	if list := b.text("main"); !strings.Contains(list, "*json.SyntaxError") {
		t.Errorf("a named error type is not shown as it is:\n%s", list)
	}
}
