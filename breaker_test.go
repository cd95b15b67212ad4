package lily

import (
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) Add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func testBreaker(clk *fakeClock) (*breaker, *[]BreakerState) {
	var changes []BreakerState
	q := QueueConfig{BreakerFailureRatio: new(0.5), BreakerMinRequests: new(10), BreakerWindowMillis: new(int64(1000)), BreakerCooldownMillis: new(int64(500))}
	return newBreaker(q, clk.Now, func(_, to BreakerState) { changes = append(changes, to) }), &changes
}

func TestBreakerOpensOnRatioWithMinRequests(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b, changes := testBreaker(clk)
	for i := 0; i < 9; i++ {
		b.record(false, 0)
	}
	if b.current() != BreakerClosed {
		t.Fatal("opened below breaker_min_requests")
	}
	b.record(false, 0)
	if b.current() != BreakerOpen || len(*changes) != 1 {
		t.Fatalf("state %s after 10 failures of 10, want open", b.current())
	}
	if _, wait, blocked := b.gate(); !blocked || wait != 500*time.Millisecond {
		t.Errorf("gate while open: wait %s blocked %v, want the 500ms cooldown", wait, blocked)
	}
}

func TestBreakerStaysClosedBelowRatio(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b, _ := testBreaker(clk)
	for i := 0; i < 100; i++ {
		b.record(i%3 != 0, 0) // a third fail
	}
	if b.current() != BreakerClosed {
		t.Fatal("opened at a 33% failure ratio with threshold 50%")
	}
}

func TestBreakerWindowSlides(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b, _ := testBreaker(clk)
	for i := 0; i < 9; i++ {
		b.record(false, 0)
	}
	clk.Add(1500 * time.Millisecond) // the old failures leave the window
	for i := 0; i < 9; i++ {
		b.record(true, 0)
	}
	b.record(false, 0)
	if b.current() != BreakerClosed {
		t.Fatal("failures older than the window still counted")
	}
}

func TestBreakerHalfOpenProbe(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b, changes := testBreaker(clk)
	for i := 0; i < 10; i++ {
		b.record(false, 0)
	}
	clk.Add(600 * time.Millisecond)
	probe, _, blocked := b.gate()
	if probe == 0 || blocked || b.current() != BreakerHalfOpen {
		t.Fatalf("after the cooldown: probe %v blocked %v state %s, want one probe half-open", probe, blocked, b.current())
	}
	if _, _, blocked := b.gate(); !blocked {
		t.Error("a second probe was allowed while the first is in flight")
	}
	b.record(true, 0) // a late non-probe outcome decides nothing
	if b.current() != BreakerHalfOpen {
		t.Fatal("a non-probe outcome closed the breaker")
	}
	b.record(false, probe) // the probe fails: open again
	if b.current() != BreakerOpen {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	clk.Add(600 * time.Millisecond)
	probe, _, _ = b.gate()
	if probe == 0 {
		t.Fatal("no probe after the second cooldown")
	}
	b.neutral(probe) // a permanent error says nothing: probe again
	next, _, _ := b.gate()
	if next == 0 {
		t.Fatal("no new probe after a neutral outcome")
	}
	b.endProbe(probe) // the first probe's ticket comes back late: it ends nothing
	if _, _, blocked := b.gate(); !blocked {
		t.Fatal("a stale probe token ended the probe in flight")
	}
	b.record(true, next)
	if b.current() != BreakerClosed {
		t.Fatal("a successful probe did not close the breaker")
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if len(*changes) != len(want) {
		t.Fatalf("changes %v, want %v", *changes, want)
	}
	for i := range want {
		if (*changes)[i] != want[i] {
			t.Errorf("change %d = %s, want %s", i, (*changes)[i], want[i])
		}
	}
}

func TestBreakerEnabledDefault(t *testing.T) {
	off, on := false, true
	cases := []struct {
		q    QueueConfig
		want bool
	}{
		{QueueConfig{}, false},
		{QueueConfig{RetryAttempts: 3}, true},
		{QueueConfig{RetryAttempts: 3, Breaker: &off}, false},
		{QueueConfig{Breaker: &on}, true},
	}
	for _, c := range cases {
		if got := c.q.BreakerEnabled(); got != c.want {
			t.Errorf("%+v: BreakerEnabled %v, want %v", c.q, got, c.want)
		}
	}
}
