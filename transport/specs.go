package transport

import "sync"

// Specs is a concurrency-safe registry of queue specs, for transports that
// need a queue's exchange, buckets or topics when settling. The zero value
// is ready to use.
type Specs struct {
	mu sync.Mutex
	m  map[string]QueueSpec
}

// Register remembers specs by queue name (a later one replaces an earlier).
func (s *Specs) Register(specs ...QueueSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]QueueSpec{}
	}
	for _, q := range specs {
		s.m[q.Name] = q
	}
}

// Lookup returns the spec of queue.
func (s *Specs) Lookup(queue string) (QueueSpec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.m[queue]
	return q, ok
}
