package transport

import (
	"sync"
	"time"
)

// Stash keeps, per consumer instance and queue, deliveries that a receive
// took from the broker but did not hand out: the rest of a batch cut
// before its first redelivery (ReceiveParams.IsolateRedeliveries). The
// next receive of that consumer and queue hands them out first. Transports
// whose broker cannot take a message back without counting a delivery
// (SQS, NATS JetStream) keep them here and extend their leases meanwhile.
//
// The zero value is ready. A Stash is not safe for concurrent use: the
// transport guards it with the lock that guards the receipts it holds.
type Stash struct {
	m       map[stashKey][]*Delivery
	keeping bool // a KeepLeases goroutine runs
}

type stashKey struct{ consumer, queue string }

// Isolate returns how many leading deliveries of ds go together: a
// redelivery alone, else the first deliveries before the first
// redelivery.
func Isolate(ds []*Delivery) int {
	if len(ds) == 0 {
		return 0
	}
	if ds[0].DeliveryCount > 1 {
		return 1
	}
	for i, d := range ds {
		if d.DeliveryCount > 1 {
			return i
		}
	}
	return len(ds)
}

// Put keeps ds, after what is kept already, for consumer on queue.
func (s *Stash) Put(consumer, queue string, ds []*Delivery) {
	if len(ds) == 0 {
		return
	}
	if s.m == nil {
		s.m = map[stashKey][]*Delivery{}
	}
	k := stashKey{consumer, queue}
	s.m[k] = append(s.m[k], ds...)
}

// Take hands out what is kept for p's consumer and queue, up to p.Max
// (at least one), cut as Isolate cuts when p.IsolateRedeliveries; nil
// when nothing is kept.
func (s *Stash) Take(p *ReceiveParams) []*Delivery {
	k := stashKey{p.Consumer, p.Queue}
	ds := s.m[k]
	if len(ds) == 0 {
		return nil
	}
	n := min(len(ds), max(p.Max, 1))
	if p.IsolateRedeliveries {
		n = min(Isolate(ds), n)
	}
	out := ds[:n:n]
	if rest := ds[n:]; len(rest) > 0 {
		s.m[k] = rest
	} else {
		delete(s.m, k)
	}
	return out
}

// Remove takes out and returns everything kept for consumer on queue.
func (s *Stash) Remove(consumer, queue string) []*Delivery {
	k := stashKey{consumer, queue}
	ds := s.m[k]
	delete(s.m, k)
	return ds
}

// RemoveConsumer forgets everything kept for consumer, on every queue.
func (s *Stash) RemoveConsumer(consumer string) {
	for k := range s.m {
		if k.consumer == consumer {
			delete(s.m, k)
		}
	}
}

// All returns every delivery kept, for every consumer and queue.
func (s *Stash) All() []*Delivery {
	var out []*Delivery
	for _, ds := range s.m {
		out = append(out, ds...)
	}
	return out
}

// KeepLeases starts, unless one runs already, a goroutine that extends
// the leases of what s keeps (nobody else holds them) with extend, every
// interval, until nothing is kept or closed reports true. The caller
// holds mu, the lock that guards s and what closed reads; the goroutine
// takes mu to look and calls extend without it.
func (s *Stash) KeepLeases(mu sync.Locker, every time.Duration, closed func() bool, extend func(*Delivery)) {
	if s.keeping {
		return
	}
	s.keeping = true
	go func() {
		for {
			time.Sleep(every) // the lease's own clock: no event to wait for
			mu.Lock()
			ds := s.All()
			if len(ds) == 0 || closed() {
				s.keeping = false
				mu.Unlock()
				return
			}
			mu.Unlock()
			for _, d := range ds {
				extend(d)
			}
		}
	}()
}
