package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lily-mq/lily/transport"
)

// callStats summarises the calls of one transport method.
type callStats struct {
	calls, items int64
	busy         time.Duration
	sizes        map[int]int64
}

// tracedTransport wraps a transport and records, per method, the number of
// calls, the number of messages they carried and the time spent in them.
// It is a diagnostic for the runtime run (sqlitebench -trace), not part of
// the measured runs.
type tracedTransport struct {
	transport.Transport
	mu    sync.Mutex
	stats map[string]*callStats
}

// withTrace returns t wrapped in a tracedTransport when c.Trace is set,
// and the wrapper (nil when not tracing; its report does nothing then).
func withTrace(c Config, t transport.Transport) (transport.Transport, *tracedTransport) {
	if c.Trace == nil {
		return t, nil
	}
	tt := &tracedTransport{Transport: t, stats: map[string]*callStats{}}
	return tt, tt
}

func (t *tracedTransport) record(method string, items int, d time.Duration) {
	t.mu.Lock()
	s := t.stats[method]
	if s == nil {
		s = &callStats{sizes: map[int]int64{}}
		t.stats[method] = s
	}
	s.calls++
	s.items += int64(items)
	s.busy += d
	s.sizes[bucket(items)]++
	t.mu.Unlock()
}

// bucket rounds n up to a power of two (0 stays 0).
func bucket(n int) int {
	b := 1
	for n > 0 && b < n {
		b *= 2
	}
	if n == 0 {
		return 0
	}
	return b
}

func (t *tracedTransport) Publish(ctx context.Context, p *transport.PublishParams) error {
	start := time.Now()
	err := t.Transport.Publish(ctx, p)
	t.record("Publish", len(p.Messages), time.Since(start))
	return err
}

func (t *tracedTransport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	start := time.Now()
	ds, err := t.Transport.Receive(ctx, p)
	t.record("Receive", len(ds), time.Since(start))
	return ds, err
}

func (t *tracedTransport) Settle(ctx context.Context, p *transport.SettleParams) error {
	start := time.Now()
	err := t.Transport.Settle(ctx, p)
	t.record("Settle", len(p.Settlements), time.Since(start))
	return err
}

// report writes one line per method, plus its batch-size histogram; on a
// nil t it writes nothing.
func (t *tracedTransport) report(w io.Writer, elapsed time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range []string{"Publish", "Receive", "Settle"} {
		s := t.stats[m]
		if s == nil {
			continue
		}
		fmt.Fprintf(w, "%-8s calls=%-6d msgs=%-7d avg batch=%6.1f  time in calls=%v (%.0f%% of wall), avg %v/call\n",
			m, s.calls, s.items, float64(s.items)/float64(s.calls), s.busy.Round(time.Millisecond),
			100*s.busy.Seconds()/elapsed.Seconds(), (s.busy / time.Duration(s.calls)).Round(time.Microsecond))
		fmt.Fprintf(w, "         batch sizes (≤2^k: calls):")
		for b := 0; b <= 1<<16; {
			if n := s.sizes[b]; n > 0 {
				fmt.Fprintf(w, " ≤%d:%d", b, n)
			}
			if b == 0 {
				b = 1
			} else {
				b *= 2
			}
		}
		fmt.Fprintln(w)
	}
}
