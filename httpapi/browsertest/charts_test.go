package browsertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/internal/consoletest"
)

// zone makes the browser read times in tz, as an operator elsewhere would.
func zone(tz string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: tz})
		return err
	})
}

// bar is one drawn bar: its series, bucket, count and height.
type bar struct {
	Series string  `json:"series"`
	Bucket int     `json:"bucket"`
	Count  int     `json:"count"`
	Height float64 `json:"height"`
}

// chartBars reads the bars of the chart with id, and the y-axis: the
// counts its ticks label and the height of one count.
func chartBars(t *testing.T, b *chrome, id string) (bars []bar, yTicks []string, unit float64) {
	t.Helper()
	type drawn struct {
		Bars   []bar    `json:"bars"`
		YTicks []string `json:"yTicks"`
		Unit   float64  `json:"unit"`
	}
	d, err := chromedp.Run(b.ctx, chromedp.Evaluate[drawn](`(() => {
		const svg = document.querySelector("#`+id+` svg");
		const ticks = [...svg.querySelectorAll(".y-tick")];
		const yOf = g => +g.querySelector("line").getAttribute("y1");
		const last = ticks[ticks.length - 1];
		return {
			bars: [...svg.querySelectorAll("rect.bar")].map(r => ({series: r.dataset.series, bucket: +r.dataset.bucket,
				count: +r.dataset.count, height: +r.getAttribute("height")})),
			yTicks: ticks.map(g => g.querySelector("text").textContent),
			unit: (yOf(ticks[0]) - yOf(last)) / +last.dataset.value,
		};
	})()`))
	if err != nil {
		t.Fatalf("read chart %s: %v", id, err)
	}
	return d.Bars, d.YTicks, d.Unit
}

// checkBars fails unless the chart's bars of series have exactly the
// counts want (bucket → count; the other buckets zero), each as tall as
// its count on the y-axis.
func checkBars(t *testing.T, b *chrome, id, series string, buckets int, want map[int]int) {
	t.Helper()
	bars, yTicks, unit := chartBars(t, b, id)
	if len(yTicks) < 2 || yTicks[0] != "0" || unit <= 0 {
		t.Errorf("%s: y-axis ticks %v (a count is %g high)", id, yTicks, unit)
	}
	n := 0
	for _, br := range bars {
		if br.Series != series {
			continue
		}
		n++
		if br.Count != want[br.Bucket] {
			t.Errorf("%s: %s bucket %d shows %d, want %d", id, series, br.Bucket, br.Count, want[br.Bucket])
		}
		if h := float64(br.Count) * unit; br.Height < h-0.02 || br.Height > h+0.02 {
			t.Errorf("%s: %s bucket %d (count %d) is %g high; the y-axis says %g", id, series, br.Bucket, br.Count, br.Height, h)
		}
	}
	if n != buckets {
		t.Errorf("%s: %d bars of %s, want one per bucket (%d)", id, n, series, buckets)
	}
}

// TestChartsInBrowser opens the charts in headless Chromium, in a zone
// half an hour off UTC: from GET /api/timeline the page draws a bar per
// bucket with exactly the seeded counts (consoletest.SeedTimeline), each
// as tall as its count on the y-axis, under a time axis whose tick labels
// are the console's one time format with its zone, nothing fetched from
// another origin; a queue and another window chart from the same data,
// and a bucket the window cannot hold is refused under the form. It skips loudly without Chromium,
// except under CI=true.
func TestChartsInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens, func(o *httpapi.Options) { o.Now = func() time.Time { return consoletest.TimelineNow } })
	f.SeedTimeline()
	b.do("log in", append([]chromedp.Action[chromedp.Void]{zone("Asia/Kolkata")}, logIn(f.ts.URL, allTokens[0].Secret)...)...)
	b.do("open the charts", chromedp.Click(chromedp.CSS(`.top a[href="#/charts"]`)), chromedp.WaitVisible(chromedp.CSS(`#chart-ledger svg`)))

	checkBars(t, b, "chart-dead-lettered", "dead_lettered", 24, map[int]int{0: 1, 22: 2, 23: 5})
	checkBars(t, b, "chart-redriven", "redriven", 24, map[int]int{12: 1, 23: 1})
	checkBars(t, b, "chart-ledger", "acked", 24, map[int]int{0: 1, 13: 1, 23: 4})
	checkBars(t, b, "chart-ledger", "accepted_unacked", 24, map[int]int{23: 2})

	type tick struct {
		At    string `json:"at"`
		Label string `json:"label"`
		When  string `json:"when"`
	}
	ticks, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]tick](`[...document.querySelectorAll("#chart-dead-lettered .x-tick")].map(g => ({
		at: g.dataset.at, label: [...g.querySelectorAll("tspan")].map(s => s.textContent).join(", "), when: when(g.dataset.at)}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ticks) != 7 || ticks[0].At != "2030-01-01T11:00:00Z" || ticks[6].At != "2030-01-02T11:00:00Z" {
		t.Fatalf("x-axis ticks %+v: want the 7 edges 2030-01-01T11:00Z, every 4 hours, to 2030-01-02T11:00Z", ticks)
	}
	for _, tk := range ticks {
		if tk.Label != tk.When || !strings.Contains(tk.Label, "GMT+5:30") || !strings.Contains(tk.Label, "2030") {
			t.Errorf("tick at %s labelled %q, want the console's format with the zone: %q", tk.At, tk.Label, tk.When)
		}
	}
	foreign, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`performance.getEntriesByType("resource").map(e => e.name).filter(u => !u.startsWith(location.origin))`))
	if err != nil || len(foreign) != 0 {
		t.Errorf("the charts fetched from elsewhere: %v %v (they must work offline)", foreign, err)
	}
	if got := b.text(`tr[data-queue="orders.created"]`); !strings.Contains(got, "orders.created\t6\t2\t5\t2") {
		t.Errorf("orders.created's totals: %q", got)
	}

	b.do("one queue", chromedp.Click(chromedp.CSS(`tr[data-queue="payments.captured"] a`)),
		chromedp.WaitVisible(chromedp.Search(`//h1[text()="Charts of payments.captured"]`)), chromedp.WaitVisible(chromedp.CSS(`#chart-ledger svg`)))
	checkBars(t, b, "chart-dead-lettered", "dead_lettered", 24, map[int]int{23: 2})
	checkBars(t, b, "chart-ledger", "acked", 24, map[int]int{0: 1})

	b.do("the last hour",
		chromedp.Evaluate[chromedp.Void](`(() => { const w = document.getElementById("t-window"); w.value = "1h"; w.dispatchEvent(new Event("change", {bubbles: true})); })()`),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#chart-dead-lettered rect.bar").length === 12`, chromedp.WithPollingMutation()))
	checkBars(t, b, "chart-dead-lettered", "dead_lettered", 12, map[int]int{10: 2}) // 10:25 in 5-minute buckets from 09:35
	at, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#chart-dead-lettered .x-tick")].map(g => g.dataset.at)`))
	if err != nil || !slices.Equal(at, []string{"2030-01-02T09:35:00Z", "2030-01-02T09:45:00Z", "2030-01-02T09:55:00Z", "2030-01-02T10:05:00Z",
		"2030-01-02T10:15:00Z", "2030-01-02T10:25:00Z", "2030-01-02T10:35:00Z"}) {
		t.Errorf("the last hour's ticks %v, %v", at, err)
	}

	b.do("a bucket the window cannot hold",
		chromedp.Evaluate[chromedp.Void](`(() => { const w = document.getElementById("t-bucket"); w.value = "1d"; w.dispatchEvent(new Event("change", {bubbles: true})); })()`),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-form + .notice.error`)))
	if msg := b.text(`.notice.error`); !strings.Contains(msg, `bucket "1d" with window "1h"`) || !strings.Contains(msg, "use one of 1m, 5m, 15m") || !strings.HasSuffix(msg, "(bucket)") {
		t.Errorf("refused bucket shows %q", msg)
	}
}
