package browsertest

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/redrive"
)

// chromiumPath is Debian's chromium ('.ci/run' installs it).
const chromiumPath = "/usr/bin/chromium"

// TestConsoleInBrowser drives the console in headless Chromium as an
// operator would: log in with a token, open the overview, open a group,
// run a redrive's dry run, confirm it, wait for the job to finish and find
// its record in the audit log. It takes docs/console.png's picture when the
// job is done, and fails when the committed picture shows another console
// (picture). It skips loudly without Chromium, except under CI=true, where
// it fails.
func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx, do, text := b.ctx, b.do, b.text
	do("log in",
		chromedp.Navigate(f.ts.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), operatorToken.Secret),
		chromedp.Submit(chromedp.ID("token")),
	)
	do("overview", chromedp.WaitVisible(chromedp.CSS(`a.groups-link[data-queue="orders.created"]`)))
	if title, err := chromedp.Run(ctx, chromedp.Title()); err != nil || title != "Dead-letter queues — Lily" {
		t.Errorf("overview title %q, %v", title, err)
	}
	do("open the queue's groups",
		chromedp.Click(chromedp.CSS(`a.groups-link[data-queue="orders.created"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="retries_exhausted"] a.redrive-link`)),
	)
	do("open the group's redrive",
		chromedp.Click(chromedp.CSS(`tr[data-key="retries_exhausted"] a.redrive-link`)),
		chromedp.WaitVisible(chromedp.ID("dry-run")),
		chromedp.SetValue(chromedp.ID("observe"), "1m"),
		chromedp.SetValue(chromedp.ID("rate"), "100"),
	)
	if st := f.States(); st["pending"] != 13 {
		t.Fatalf("before the dry run: %v", st)
	}
	do("dry run", chromedp.Click(chromedp.ID("dry-run")), chromedp.WaitVisible(chromedp.ID("dry-result")))
	if plan := text("#dry-result p"); !strings.Contains(plan, "Would redrive 3 and mark 1 needs manual") {
		t.Errorf("dry run shows %q", plan)
	}
	if st := f.States(); st["pending"] != 13 {
		t.Fatalf("the dry run changed states: %v", st)
	}
	f.Consume("orders.created") // the sample passes only when a consumer acks it
	do("confirm and wait for the job", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.CSS(`#job-state .job-done`)))
	if state := text("#job-state"); !strings.Contains(state, "redriven 3, needs manual 1, failed 0 of 4") {
		t.Errorf("job state %q", state)
	}
	b.picture("console.png") // docs/console.md's picture: the redrive, done
	do("find it in the audit log", chromedp.Click(chromedp.ID("job-audit")), chromedp.WaitVisible(chromedp.CSS(`table.audit tr.a-redrive`)))
	auditText := text("table.audit tbody")
	for _, want := range []string{"otto", catalog.OutcomeRedriven, catalog.OutcomeNeedsManual, catalog.OutcomeObserved} {
		if !strings.Contains(auditText, want) {
			t.Errorf("audit log lacks %q:\n%s", want, auditText)
		}
	}
	if st := f.States(); st["redriven"] != 3 || st["needs_manual"] != 1 {
		t.Errorf("after the redrive: %v", st)
	}
	// A parked key (ordering park): its page shows it; the dry run tells
	// what moves, the confirmation redrives its head.
	if err := redrive.NewKeys(f.Catalog).HoldKey(context.Background(), "orders.created", "customer-0", redrive.KeyModePark, redrive.KeyHeld, "orders-00"); err != nil {
		t.Fatal(err)
	}
	do("open the parked keys", chromedp.Click(chromedp.CSS(`a[href="#/parked"]`)),
		chromedp.WaitVisible(chromedp.Search(`//th[@scope="row" and text()="customer-0"]`)))
	do("dry-run the unpark", chromedp.Click(chromedp.Search(`//button[text()="Dry run"]`)),
		chromedp.WaitVisible(chromedp.Search(`//button[starts-with(text(), "Confirm: unpark (1 message,")]`)))
	do("unpark", chromedp.Click(chromedp.Search(`//button[starts-with(text(), "Confirm: unpark")]`)),
		chromedp.WaitVisible(chromedp.Search(`//*[contains(text(), "the head was sent")]`)))
	if st := f.States(); st["redriven"] != 4 {
		t.Errorf("after the unpark: %v, want the head redriven too", st)
	}
	f.Conserved()
}
