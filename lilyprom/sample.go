package lilyprom

import (
	"context"
	"sync"
	"time"
)

// DefaultBrokerWait is how long a scrape waits for a broker's answers
// (in-flight counts, broker DLQ depths) before it serves the last answers
// it has. A loaded RabbitMQ took over a second to answer the passive
// declares and management API calls of one queue, longer than a 1 s scrape
// timeout: the whole scrape then failed, catalog gauges included, and an
// alert on them never fired (docs/design.md §9.9).
const DefaultBrokerWait = 500 * time.Millisecond

// sampler reads what only a broker can tell without making a scrape wait
// on the broker longer than wait. One read runs at a time, bounded by
// timeout; a scrape starts one unless one runs, waits up to wait for it,
// and serves the last read that finished — this one when it was quick
// enough, else the one before (a scrape or so old). A read that ends
// after its scrape gave up is kept for the next.
type sampler[T any] struct {
	read    func(context.Context) T
	timeout time.Duration
	wait    time.Duration

	mu      sync.Mutex
	running chan struct{} // closed when the read in flight ends; nil when none runs
	last    T
	have    bool // a read has finished
}

// get returns the last finished read, and false when none has finished.
func (s *sampler[T]) get() (T, bool) {
	s.mu.Lock()
	if s.running == nil {
		s.running = make(chan struct{})
		go s.run(s.running)
	}
	done := s.running
	s.mu.Unlock()
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.have
}

func (s *sampler[T]) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	v := s.read(ctx)
	cancel()
	s.mu.Lock()
	s.last, s.have, s.running = v, true, nil
	s.mu.Unlock()
	close(done)
}
