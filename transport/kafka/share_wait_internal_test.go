package kafka

import (
	"sync"
	"testing"
	"time"
)

// TestWaitSettledEndsWhenItsTimerFires: a receive waiting for a held
// record to be settled returns when its timer fires, though nothing was
// settled and the clock says the wait is not over. Before, the waiter
// read its deadline from the clock a moment after setting the timer; a
// wake-up by the timer a moment before that deadline sent it back to
// sleep with no one left to wake it: a Receive hung for the rest of a CI
// run (TestShareOverLimitRunsAlone, 10 minutes). The test's timer fires
// at once for a wait of an hour: the same race, made certain.
func TestWaitSettledEndsWhenItsTimerFires(t *testing.T) {
	afterFunc = func(_ time.Duration, f func()) *time.Timer { return time.AfterFunc(0, f) }
	t.Cleanup(func() { afterFunc = time.AfterFunc })
	s := &shareInstance{held: map[*shareEntry]struct{}{{}: {}}}
	s.cond = sync.NewCond(&s.mu)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.mu.Lock()
		s.waitSettled(time.Hour)
		s.mu.Unlock()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a watchdog, not a timing assertion
		t.Fatal("waitSettled slept on after its timer fired, with nothing settled")
	}
}
