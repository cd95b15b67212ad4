// Package idcount counts handler calls and the event IDs handled more than
// once: the conservation check of the competing-consumer runs.
package idcount

import (
	"sync"
	"sync/atomic"
)

// Counter counts handler calls and the event IDs seen more than once. It
// is safe for concurrent use.
type Counter struct {
	mu    sync.Mutex
	seen  map[string]struct{}
	calls atomic.Int64
	dups  atomic.Int64
}

// New returns a Counter sized for n event IDs.
func New(n int) *Counter { return &Counter{seen: make(map[string]struct{}, n)} }

// Handled records one handler call of event ID id and reports whether id
// was new.
func (k *Counter) Handled(id string) bool {
	k.calls.Add(1)
	k.mu.Lock()
	_, dup := k.seen[id]
	if !dup {
		k.seen[id] = struct{}{}
	}
	k.mu.Unlock()
	if dup {
		k.dups.Add(1)
	}
	return !dup
}

// Calls is the number of handler calls recorded.
func (k *Counter) Calls() int64 { return k.calls.Load() }

// Duplicates is the number of calls for an event ID already seen.
func (k *Counter) Duplicates() int64 { return k.dups.Load() }
