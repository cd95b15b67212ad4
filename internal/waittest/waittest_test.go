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
