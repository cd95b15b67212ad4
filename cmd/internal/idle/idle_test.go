package idle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
)

// busyCounter reports one message in flight for its first busy calls,
// then none.
type busyCounter struct {
	mu    sync.Mutex
	calls int
	busy  int
	third chan struct{} // closed at the third call, when not nil
}

func (c *busyCounter) InFlight(context.Context, string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.calls == 3 && c.third != nil {
		close(c.third)
	}
	if c.calls <= c.busy {
		return 1, nil
	}
	return 0, nil
}

// TestStopWhenIdle: it cancels only after the queue stopped reporting
// messages in flight, and then once.
func TestStopWhenIdle(t *testing.T) {
	c := &busyCounter{busy: 5}
	cancelled := make(chan int, 2)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	q := lily.QueueConfig{Name: "orders"}.WithDefaults()
	done := make(chan struct{})
	go func() {
		StopWhenIdle(ctx, func() {
			c.mu.Lock()
			cancelled <- c.calls
			c.mu.Unlock()
		}, c, q, 5*time.Millisecond)
		close(done)
	}()
	<-done
	if n := <-cancelled; n <= c.busy {
		t.Errorf("cancelled at the counter's call %d, while it still reported work (busy for %d calls)", n, c.busy)
	}
	if len(cancelled) != 0 {
		t.Error("cancelled twice")
	}
}

// TestStopWhenIdleEndsWithContext: a queue that stays busy is not
// cancelled; StopWhenIdle returns when its context ends.
func TestStopWhenIdleEndsWithContext(t *testing.T) {
	c := &busyCounter{busy: 1 << 30, third: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	q := lily.QueueConfig{Name: "orders"}.WithDefaults()
	done := make(chan struct{})
	cancelled := false
	go func() {
		StopWhenIdle(ctx, func() { cancelled = true }, c, q, time.Millisecond)
		close(done)
	}()
	<-c.third // it has polled a busy queue three times
	stop()
	<-done
	if cancelled {
		t.Error("cancelled a queue that never went idle")
	}
}
