// Package browsertest holds no code: its tests drive the console of
// package httpapi in a headless Chromium (chromedp) as an operator would
// — log in, triage, search, redrive, edit — over the same fixture as
// httpapi's own tests (internal/consoletest). They live in a directory
// (and module) of their own so that the root module needs no chromedp.
//
// Without Chromium (Debian's chromium, /usr/bin/chromium) the tests skip
// loudly, except under CI=true, where they fail. TestConsoleInBrowser
// checks the console's picture in docs/console.md, docs/console.png: the
// picture carries the shape of the page it shows (navigation, headings,
// labels, buttons, columns), and the test fails when the live console's
// differs. From the repository root, this writes it anew:
//
//	cd httpapi/browsertest && go test -count=1 -run TestConsoleInBrowser . -update-screenshots
package browsertest
