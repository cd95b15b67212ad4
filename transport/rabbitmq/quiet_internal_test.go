package rabbitmq

import (
	"testing"
	"time"
)

// TestSettleClock: a channel that sent fewer than settleBurst settlement
// frames closes at once; one that just sent a burst waits out settleQuiet
// after the last frame; frames further apart than settleQuiet start a new
// count.
func TestSettleClock(t *testing.T) {
	var s settleClock
	if w := s.wait(); w != 0 {
		t.Errorf("no settlements: wait %v, want 0", w)
	}
	s.note(settleBurst - 1)
	if w := s.wait(); w != 0 {
		t.Errorf("%d settlements: wait %v, want 0 (no burst)", settleBurst-1, w)
	}
	s.note(1)
	if w := s.wait(); w <= 0 || w > settleQuiet {
		t.Errorf("a burst of %d: wait %v, want (0, %v]", settleBurst, w, settleQuiet)
	}
	s.last = time.Now().Add(-settleQuiet - time.Millisecond)
	if w := s.wait(); w != 0 {
		t.Errorf("a burst that ended %v ago: wait %v, want 0", settleQuiet, w)
	}
	s.note(1) // long after the burst: counted anew
	if s.recent != 1 || s.wait() != 0 {
		t.Errorf("one frame after a quiet period: recent %d, wait %v; want 1, 0", s.recent, s.wait())
	}
	s.note(settleSoftLimit - 1) // past the soft limit: part of it stashed
	if w := s.wait(); w <= settleQuiet || w > settleQuietLong {
		t.Errorf("a burst of %d: wait %v, want (%v, %v]", settleSoftLimit, w, settleQuiet, settleQuietLong)
	}
}
