package browsertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/catalog"
)

// TestConsoleConsumersInBrowser drives the Consumers page in headless
// Chromium: a live and a stale instance (the stale one shown, marked),
// then an operator pauses orders.created with a reason and resumes it
// from the console; the catalog holds the pause in between and the audit
// log both decisions under the operator's name. It skips loudly without
// Chromium, except under CI=true, where it fails.
func TestConsoleConsumersInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	ctx := context.Background()
	now := time.Now()
	for _, c := range []*catalog.Consumer{
		// An hour-long interval keeps the live one live however slowly the
		// test runs.
		{Instance: "orders-live-1", Queue: "orders.created", Name: "orders-svc", Version: "v2", Host: "web-1", PID: 4242,
			Breaker: "closed", HeartbeatMillis: time.Hour.Milliseconds(), StartedAt: now.Add(-time.Hour), LastSeen: now},
		{Instance: "orders-dead-2", Queue: "orders.created", Name: "orders-svc", Version: "v1", Host: "web-2", PID: 77,
			Breaker: "open", HeartbeatMillis: 5000, StartedAt: now.Add(-2 * time.Hour), LastSeen: now.Add(-10 * time.Minute)},
	} {
		if err := f.Catalog.Heartbeat(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	step, textOf := b.do, b.text
	step("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	step("open the consumers",
		chromedp.Click(chromedp.CSS(`a[href="#/consumers"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-instance="orders-dead-2"]`)),
	)
	if got := textOf(`tr[data-instance="orders-live-1"] .instance-state`); got != "running" {
		t.Errorf("live instance's state %q, want running", got)
	}
	if got := textOf(`tr[data-instance="orders-dead-2"] .instance-state`); !strings.HasPrefix(got, "stale — silent for 10m") {
		t.Errorf("stale instance's state %q, want stale, silent for 10m", got)
	}
	if got := textOf(`tr[data-instance="orders-dead-2"]`); !strings.Contains(got, "web-2") || !strings.Contains(got, "open") || !strings.Contains(got, "v1") {
		t.Errorf("stale instance's row %q, want its host, breaker and version", got)
	}
	if got := textOf(`tr[data-queue="orders.created"]`); !strings.Contains(got, "consuming\t1\t1") {
		t.Errorf("orders.created row %q, want consuming with 1 running and 1 stale", got)
	}
	step("pause orders.created",
		chromedp.SendKeys(chromedp.ID("pause-reason-orders_created"), "payments API maintenance"),
		chromedp.Click(chromedp.Search(`//tr[@data-queue="orders.created"]//button[text()="Pause orders.created"]`)),
		chromedp.WaitVisible(chromedp.Search(`//tr[@data-queue="orders.created"]//button[text()="Resume orders.created"]`)),
	)
	if got := textOf(`tr[data-queue="orders.created"] .queue-state`); !strings.HasPrefix(got, "paused by otto since") || !strings.HasSuffix(got, ": payments API maintenance") {
		t.Errorf("paused queue's state %q", got)
	}
	ps, err := f.Catalog.Pauses(ctx)
	if err != nil || len(ps) != 1 || ps[0].Queue != "orders.created" || ps[0].Actor != "otto" || ps[0].Reason != "payments API maintenance" {
		t.Fatalf("catalog pauses after the console's pause: %+v, %v", ps, err)
	}
	if got := textOf(`tr[data-queue="payments.captured"] .queue-state`); got != "consuming" {
		t.Errorf("payments.captured's state %q, want consuming (only orders.created was paused)", got)
	}
	step("resume orders.created",
		chromedp.Click(chromedp.Search(`//tr[@data-queue="orders.created"]//button[text()="Resume orders.created"]`)),
		chromedp.WaitVisible(chromedp.Search(`//tr[@data-queue="orders.created"]//button[text()="Pause orders.created"]`)),
	)
	if ps, err := f.Catalog.Pauses(ctx); err != nil || len(ps) != 0 {
		t.Errorf("catalog pauses after the console's resume: %+v, %v", ps, err)
	}
	var audit []string
	err = f.Catalog.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
		if r.Action == catalog.ActionPause || r.Action == catalog.ActionResume {
			audit = append(audit, r.Actor+" "+r.Action+" "+r.Outcome+" "+r.Detail)
		}
		return nil
	})
	if want := "otto pause paused payments API maintenance|otto resume resumed "; err != nil || strings.Join(audit, "|") != want {
		t.Errorf("audit %q, %v; want %q", audit, err, want)
	}
	f.Conserved()
}
