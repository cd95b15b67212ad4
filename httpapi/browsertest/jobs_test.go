package browsertest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// startRedrive starts a redrive job through the API as the operator and
// returns its ID.
func startRedrive(t *testing.T, f *fixture, body string) int64 {
	t.Helper()
	req, err := http.NewRequest("POST", f.ts.URL+"/api/redrives", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+operatorToken.Secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var j struct {
		ID    int64  `json:"id"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /api/redrives %s: %d %+v %v", body, resp.StatusCode, j, err)
	}
	return j.ID
}

// TestJobProgressLiveInBrowser runs a real redrive job — orders.created's
// 10 pending entries at two per second — while the Redrives page is open:
// the job's row shows handled/total and a bar, goes up while the job runs
// (the same row, the page never reloaded), and ends with the final state
// and counts. It skips loudly without Chromium, except under CI=true.
func TestJobProgressLiveInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t, allTokens)
	b.do("log in", logIn(f.ts.URL, operatorToken.Secret)...)
	jid := strconv.FormatInt(startRedrive(t, f, `{"filter": {"queue": "orders.created"}, "rate": 2}`), 10)
	row := `document.querySelector('#jobs tr[data-job="` + jid + `"]')`
	b.do("open the redrives", chromedp.Click(chromedp.CSS(`.top a[href="#/redrives"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#jobs tr[data-job="`+jid+`"] td.job-progress progress`)))
	type shown struct {
		Done     int    `json:"done"`
		Total    int    `json:"total"`
		Bar      int    `json:"bar"`
		BarMax   int    `json:"barMax"`
		State    string `json:"state"`
		Same     bool   `json:"same"`
		Redriven string `json:"redriven"`
		Manual   string `json:"manual"`
		Cancel   int    `json:"cancel"`
	}
	// read is the row as shown; same says it is the row first seen.
	read := `(() => { const tr = ` + row + `; const [done, total] = tr.querySelector(".job-done-count").textContent.split("/").map(Number);
		const p = tr.querySelector("progress"), td = tr.querySelectorAll("td");
		return {done, total, bar: +p.value, barMax: +p.max, state: tr.querySelector(".job-state").textContent, same: tr === window.firstRow,
			redriven: td[5].textContent, manual: td[6].textContent, cancel: tr.querySelectorAll("button.job-cancel").length}; })()`
	first, err := chromedp.Run(b.ctx, chromedp.Evaluate[shown](`(() => { window.firstRow = `+row+`; return `+read+`; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if first.Total != 10 || first.Done >= 9 || !strings.HasPrefix(first.State, "running") && !strings.HasPrefix(first.State, "queued") {
		t.Fatalf("the job as the page first shows it: %+v (want it running, well short of its 10 entries at 2/s)", first)
	}
	mid, err := chromedp.Run(b.ctx, chromedp.Poll[shown](`(() => { const s = `+read+`; return s.same && s.done > `+strconv.Itoa(first.Done)+` && s.done < s.total ? s : null; })()`,
		chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		t.Fatalf("waiting for the job's progress to go up in place from %+v: %v", first, err)
	}
	if mid.Bar != mid.Done || mid.BarMax != 10 || !strings.HasPrefix(mid.State, "running") || mid.Cancel != 1 {
		t.Errorf("the running job shows %+v: want the bar at its count, the state running and its cancel button", mid)
	}
	end, err := chromedp.Run(b.ctx, chromedp.Poll[shown](`(() => { const s = `+read+`; return s.same && s.state.startsWith("done") ? s : null; })()`,
		chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		t.Fatalf("waiting for the job to show it is done: %v", err)
	}
	if end.Done != 10 || end.Total != 10 || end.Bar != 10 || end.Redriven != "9" || end.Manual != "1" || end.Cancel != 0 {
		t.Errorf("the ended job shows %+v: want 10/10, 9 redriven, 1 needs manual, no cancel button", end)
	}
	if st := f.States(); st["redriven"] != 9 || st["needs_manual"] != 1 {
		t.Errorf("catalog after the job: %v", st)
	}
	f.Conserved() // the nine redriven wait in their queue, the rest in the catalog
}
