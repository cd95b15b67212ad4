// Package waittest is the one polling loop of Lily's tests: a test that
// waits for an event with no signal of its own (a row in the catalog, a
// broker's queue depth, a line a child process prints) polls it here, and
// a wait that never ends fails with what it awaited and what it saw last.
//
// It links the standard library alone, so that any package's tests may
// import it (the ledger's internal tests among them, which
// transport/transporttest, built on the ledger, cannot serve).
package waittest

import (
	"context"
	"testing"
	"time"
)

// DefaultLimit bounds a wait: long enough for a loaded CI machine, short
// of the test binary's timeout, so that a hang fails with what it was
// waiting for. It is a bound on a hang, not a timing assertion.
const DefaultLimit = 30 * time.Second

// DefaultEvery is how often a condition is looked at.
const DefaultEvery = 10 * time.Millisecond

// Poller is a wait's bounds; its zero value waits up to DefaultLimit,
// looking every DefaultEvery.
type Poller struct {
	// Limit is how long For waits before it fails the test.
	Limit time.Duration
	// Every is the pause between two looks: longer for a condition that
	// is costly to evaluate (a command run against a broker's management
	// API, which refreshes its statistics every few seconds).
	Every time.Duration
	// Progress makes Limit bound a stall rather than the whole wait: each
	// time cond reports a state different from the one before, the limit
	// starts again. For a wait on a workload that moves forward at the
	// machine's pace (a handler process started per message, on a loaded
	// CI machine): it fails when the work stops, not when it is slow. The
	// test binary's own timeout still bounds it.
	Progress bool
}

// For polls cond until it holds, failing the test after 30 seconds with
// what was awaited.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Poller{}.For(t, what, func() (bool, string) { return cond(), "" })
}

// ForState is For for a cond that also describes what it observed (a
// count, a job's state): the failure prints the last state, so that a
// wait that never ends says how far it got.
func ForState(t testing.TB, what string, cond func() (ok bool, state string)) {
	t.Helper()
	Poller{}.For(t, what, cond)
}

// For polls cond until it holds; past p's limit it fails the test with
// what was awaited and the last state cond reported. cond runs on the
// test's goroutine, so it may itself fail the test.
func (p Poller) For(t testing.TB, what string, cond func() (ok bool, state string)) {
	t.Helper()
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stall := time.AfterFunc(limit, cancel)
	defer stall.Stop()
	seen := ""
	watched := cond
	if p.Progress {
		watched = func() (bool, string) {
			ok, state := cond()
			if state != seen {
				seen = state
				stall.Reset(limit)
			}
			return ok, state
		}
	}
	if ok, state := p.Poll(ctx, watched); !ok {
		if p.Progress {
			limit = -limit // printed as "after 30s without progress"
		}
		if state == "" {
			t.Fatalf("timed out after %s waiting for %s", stalled(limit), what)
		} else {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", stalled(limit), what, state)
		}
	}
}

// stalled describes a limit: a negative one bounded a stall (Progress).
func stalled(limit time.Duration) string {
	if limit < 0 {
		return (-limit).String() + " without progress"
	}
	return limit.String()
}

// Poll calls cond until it holds or ctx ends, and returns whether it held
// and the last state it reported. It fails no test: it is for a goroutine
// that ends a run once a condition holds, or a process without a
// testing.T (a test binary's child process).
func (p Poller) Poll(ctx context.Context, cond func() (ok bool, state string)) (bool, string) {
	every := p.Every
	if every <= 0 {
		every = DefaultEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return true, state
		}
		select {
		case <-ctx.Done():
			return false, state
		case <-tick.C:
		}
	}
}
