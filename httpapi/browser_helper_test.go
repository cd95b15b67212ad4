package httpapi

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium is a headless Chromium driving the console of a fixture.
type chromium struct {
	t   *testing.T
	ctx context.Context
}

// newBrowser starts headless Chromium for t (stopped at its end). It
// skips loudly without Chromium, except under CI=true, where it fails.
func newBrowser(t *testing.T) *chromium {
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
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1366, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	return &chromium{t: t, ctx: ctx}
}

// do runs the steps, failing the test with name on an error.
func (b *chromium) do(name string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", name, err)
	}
}

// text returns the text of the element sel selects.
func (b *chromium) text(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}
