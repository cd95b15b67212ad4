package browsertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TestConsoleListsAttempts (issue 32): the entry view lists the attempts
// the dead letter carried (x-lily-attempts) under its summary, above the
// body: numbered in order, each with its time (and zone), retry count,
// outcome and error; the attempts the header gave up are counted after
// the first, and the numbering skips them.
func TestConsoleListsAttempts(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h := transport.Headers{}
	evidence.Record{Reason: evidence.ReasonRetriesExhausted, ErrorType: "*net.OpError", ErrorMessage: "attempt 13 failed",
		Source: "sqlite/orders.created", DeadLetteredAt: t0.Add(time.Hour)}.Apply(h)
	const total = 13 // two more than the header keeps
	for n := range total {
		outcome := evidence.OutcomeRetry
		if n == total-1 {
			outcome = evidence.OutcomeDeadLetter
		}
		evidence.AddAttempt(h, evidence.Attempt{At: t0.Add(time.Duration(n) * time.Minute), RetryCount: n, DeliveryCount: 1,
			ErrorType: "*net.OpError", ErrorMessage: fmt.Sprintf("attempt %d failed", n+1), Outcome: outcome})
	}
	e := catalog.NewEntry("orders.created", transport.Message{EventID: "tries-1", Body: []byte(`{"id":1}`)}, h, "retries_exhausted", time.Now())
	if err := f.Catalog.Insert(ctx, e); err != nil {
		t.Fatal(err)
	}
	b.do("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	b.do("open the entry",
		chromedp.Navigate(fmt.Sprintf("%s/#/entry/%d", f.ts.URL, e.ID)),
		chromedp.WaitVisible(chromedp.CSS(`ol.attempts`)),
	)
	type shown struct {
		Value   int    `json:"value"`
		Text    string `json:"text"`
		Time    string `json:"time"`
		Dropped bool   `json:"dropped"`
	}
	items, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]shown](`[...document.querySelectorAll("ol.attempts > li")].map(li => ({
		value: li.value, text: li.textContent, dropped: li.classList.contains("attempts-dropped"),
		time: li.querySelector("time") ? li.querySelector("time").getAttribute("datetime") + "|" + li.querySelector("time").textContent : ""}))`))
	if err != nil || len(items) != 1+evidence.MaxRecentAttempts+1 {
		t.Fatalf("attempt items %+v (%v); want the first, the dropped count and %d recent", items, err, evidence.MaxRecentAttempts)
	}
	if !items[1].Dropped || items[1].Text != "… 2 more attempts not kept: the message carries the first and the most recent ones" {
		t.Errorf("second item %+v, want the count of the dropped attempts", items[1])
	}
	for i, it := range items {
		if i == 1 {
			continue
		}
		n := 0 // the attempt's index: the first, then 3..12 (1 and 2 were dropped)
		if i > 1 {
			n = i + 1
		}
		outcome := "retried"
		if n == total-1 {
			outcome = "dead-lettered"
		}
		want := fmt.Sprintf(" — retry %d, delivery 1 — %s: *net.OpError: attempt %d failed", n, outcome, n+1)
		at := t0.Add(time.Duration(n) * time.Minute).Format(time.RFC3339)
		if it.Value != n+1 || it.Dropped || len(it.Time) < len(at) || it.Time[:len(at)] != at || !zoned.MatchString(it.Time) ||
			it.Text[len(it.Text)-len(want):] != want {
			t.Errorf("item %d = %+v; want number %d at %s (with its zone) and %q", i, it, n+1, at, want)
		}
	}
	if h2, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("ol.attempts").previousElementSibling.textContent`)); err != nil || h2 != fmt.Sprintf("Attempts (%d)", total) {
		t.Errorf("heading %q (%v)", h2, err)
	}
	// Under the summary, above the body.
	order, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(() => { const ol = document.querySelector("ol.attempts");
		return !!(document.querySelector("dl.kv").compareDocumentPosition(ol) & Node.DOCUMENT_POSITION_FOLLOWING) &&
			!!(ol.compareDocumentPosition(document.querySelector("pre.body")) & Node.DOCUMENT_POSITION_FOLLOWING); })()`))
	if err != nil || !order {
		t.Errorf("the attempts are not between the summary and the body (%v)", err)
	}
}
