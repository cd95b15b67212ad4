package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chrome drives a headless Chromium for the console's browser tests.
type chrome struct {
	t   *testing.T
	ctx context.Context
}

// browser is the one headless Chromium the package's tests share: each
// test gets a tab of its own in a browser context of its own (cookies and
// storage apart), so the tests stay independent and Chromium starts once
// instead of once per test (about a CPU-second each).
var browser struct {
	once   sync.Once
	ctx    context.Context // the first tab's: a parent of every test's tab
	err    error
	cancel []context.CancelFunc
	dir    string // Chromium's user data directory
}

// TestMain stops the shared Chromium after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(browser.cancel) - 1; i >= 0; i-- {
		browser.cancel[i]()
	}
	if browser.dir != "" {
		os.RemoveAll(browser.dir)
	}
	os.Exit(code)
}

// startBrowser starts the shared Chromium at path, once.
func startBrowser(path string) error {
	browser.once.Do(func() {
		dir, err := os.MkdirTemp("", "browsertest-chromium")
		if err != nil {
			browser.err = err
			return
		}
		browser.dir = dir
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.UserDataDir(dir),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.WindowSize(viewportWidth, viewportHeight),
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx)
		browser.cancel = append(browser.cancel, cancelAlloc, cancel)
		if err := chromedp.Do(ctx); err != nil {
			browser.err = fmt.Errorf("start chromium %s: %w", path, err)
			return
		}
		browser.ctx = ctx
	})
	return browser.err
}

// The console's window in every test (and in the docs' pictures).
const viewportWidth, viewportHeight = 1366, 900

// newBrowser opens a tab of the shared headless Chromium for the test, in
// a browser context of the test's own (closed at its end). It skips loudly
// without Chromium, except under CI=true, where it fails.
func newBrowser(t *testing.T) *chrome {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		if p, lerr := exec.LookPath("chromium"); lerr == nil {
			path = p
		} else if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not installed (%v): CI must run the browser test ('apt-get install -y chromium', as .ci/run does)", err)
		} else {
			t.Skipf("SKIPPED LOUDLY: chromium is not installed (%v); install it with 'apt-get install -y chromium' to run the console's browser test", err)
		}
	}
	if err := startBrowser(path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	b := &chrome{t: t, ctx: ctx}
	b.do("open a tab", chromedp.EmulateViewport(viewportWidth, viewportHeight))
	return b
}

// do runs the steps, failing the test with name on an error.
func (b *chrome) do(name string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", name, err)
	}
}

// text returns the visible text of the first element matching the CSS
// selector, once one exists. The text is read in one script evaluation,
// not through a DOM node ID: the console re-renders a page when its data
// arrives, and a node found by one call could be gone by the next ("No node
// with given id found", seen in a CI run on the audit page).
func (b *chrome) text(sel string) string {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.WaitReady(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	q, err := json.Marshal(sel)
	if err != nil {
		b.t.Fatal(err)
	}
	const missing = "\x00missing"
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`(() => { const e = document.querySelector(%s); return e === null ? %q : e.innerText; })()`, q, missing)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	if v == missing {
		b.t.Fatalf("text of %s: the element is gone (the page re-rendered without it)", sel)
	}
	return v
}

// logIn is the steps that log in to the console at url with a token's
// secret and wait for the overview's orders.created queue.
func logIn(url, secret string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(url + "/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), secret),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a.groups-link[data-queue="orders.created"]`)),
	}
}
