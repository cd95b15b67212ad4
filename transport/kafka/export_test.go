package kafka

// Revoking returns how many partitions the instance of consumer on queue
// is giving up in a revoke that waits (RevokeTimeout) for its hand-outs to
// be settled, and how many revocations the instance has seen. Test-only:
// a test waits on it to settle while a revoke waits, instead of sleeping
// until one probably does.
func Revoking(t *Transport, queue, consumer string) (parts int, revocations uint64) {
	t.mu.Lock()
	c := t.instances[instanceKey{queue, consumer}]
	t.mu.Unlock()
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.parts {
		if p.revoking {
			parts++
		}
	}
	return parts, c.epoch
}

// ShareUnseen returns how many records the share client of consumer on
// queue has fetched that no poll returned (its acquired fetch hook).
// Test-only: a test waits on it for a fetch's answer to reach the client.
func ShareUnseen(t *Transport, queue, consumer string) int {
	t.mu.Lock()
	s := t.shares[instanceKey{queue, consumer}]
	t.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	acq := s.acq
	s.mu.Unlock()
	if acq == nil {
		return 0
	}
	return len(acq.unseen())
}
