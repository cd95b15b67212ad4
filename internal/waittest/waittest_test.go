package waittest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message instead of
// ending the goroutine, so that a failing wait can be looked at.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// TestForReturnsOnceCondHolds: the wait ends at the look that sees the
// condition hold, and fails nothing.
func TestForReturnsOnceCondHolds(t *testing.T) {
	looks := 0
	r := &recorder{TB: t}
	For(r, "the third look", func() bool { looks++; return looks == 3 })
	if r.failed != "" || looks != 3 {
		t.Errorf("failed %q after %d looks, want no failure after 3", r.failed, looks)
	}
}

// TestForFailsWithWhatAndLastState: a condition that never holds fails
// the test with what was awaited and the last state it reported.
func TestForFailsWithWhatAndLastState(t *testing.T) {
	looks := 0
	r := &recorder{TB: t}
	Poller{Limit: 50 * time.Millisecond, Every: time.Millisecond}.For(r, "a row", func() (bool, string) {
		looks++
		return false, fmt.Sprintf("%d looks", looks)
	})
	want := fmt.Sprintf("waiting for a row; last seen: %d looks", looks)
	if !strings.Contains(r.failed, want) || looks < 2 {
		t.Errorf("failure %q after %d looks, want it to contain %q", r.failed, looks, want)
	}
}

// TestPollStopsWithItsContext: Poll fails no test; it reports that the
// condition never held, with its last state, once ctx ends.
func TestPollStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, state := Poller{}.Poll(ctx, func() (bool, string) { return false, "empty" })
	if ok || state != "empty" {
		t.Errorf("Poll = %v, %q; want false, \"empty\"", ok, state)
	}
}

// TestProgressBoundsAStall: with Progress, a wait whose state changes at
// every look goes on past Limit (200 looks at least 1 ms apart outlast a
// 30 ms limit) and ends when the condition holds; without it, the same
// wait fails.
func TestProgressBoundsAStall(t *testing.T) {
	for _, progress := range []bool{true, false} {
		looks := 0
		r := &recorder{TB: t}
		Poller{Limit: 30 * time.Millisecond, Every: time.Millisecond, Progress: progress}.For(r, "200 looks", func() (bool, string) {
			looks++
			return looks == 200, fmt.Sprintf("look %d", looks)
		})
		if progress && (r.failed != "" || looks != 200) {
			t.Errorf("with Progress: failed %q after %d looks, want no failure after 200", r.failed, looks)
		}
		if !progress && (r.failed == "" || looks >= 200) {
			t.Errorf("without Progress: %d looks, failed %q; want a failure before 200 looks", looks, r.failed)
		}
	}
}

// TestProgressStallFails: with Progress, a state that stops changing fails
// the wait, and the failure says it was a stall.
func TestProgressStallFails(t *testing.T) {
	r := &recorder{TB: t}
	Poller{Limit: 20 * time.Millisecond, Every: time.Millisecond, Progress: true}.For(r, "a row", func() (bool, string) {
		return false, "stuck at 17 of 30"
	})
	if want := "20ms without progress waiting for a row; last seen: stuck at 17 of 30"; !strings.Contains(r.failed, want) {
		t.Errorf("failure %q, want it to contain %q", r.failed, want)
	}
}
