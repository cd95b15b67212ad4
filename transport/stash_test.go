package transport

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/waittest"
)

func deliveries(counts ...int) []*Delivery {
	ds := make([]*Delivery, len(counts))
	for i, c := range counts {
		ds[i] = &Delivery{DeliveryCount: c, Message: Message{EventID: string(rune('a' + i))}}
	}
	return ds
}

func ids(ds []*Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.EventID)
	}
	return out
}

func TestIsolate(t *testing.T) {
	for _, c := range []struct {
		counts []int
		want   int
	}{{nil, 0}, {[]int{1, 1, 1}, 3}, {[]int{2, 1}, 1}, {[]int{1, 1, 3, 1}, 2}} {
		if got := Isolate(deliveries(c.counts...)); got != c.want {
			t.Errorf("Isolate(%v) = %d, want %d", c.counts, got, c.want)
		}
	}
}

// TestStash keeps a batch's rest and hands it out again: a redelivery
// alone when isolating, up to Max otherwise, per consumer and queue, and
// forgets a consumer's deliveries when told to.
func TestStash(t *testing.T) {
	var s Stash
	ds := deliveries(1, 2, 1, 1)
	s.Put("c1", "q", ds)
	s.Put("c2", "q", deliveries(1))
	p := &ReceiveParams{Consumer: "c1", Queue: "q", Max: 10, IsolateRedeliveries: true}
	if got := ids(s.Take(p)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first take = %v, want [a]: the batch stops before the redelivery", got)
	}
	if got := ids(s.Take(p)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("second take = %v, want [b]: the redelivery alone", got)
	}
	p.IsolateRedeliveries, p.Max = false, 1
	if got := ids(s.Take(p)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("third take = %v, want [c]: at most Max", got)
	}
	if got := len(s.All()); got != 2 {
		t.Fatalf("All = %d deliveries, want 2 (d of c1, a of c2)", got)
	}
	s.RemoveConsumer("c1")
	if got := s.Take(p); got != nil {
		t.Fatalf("take after RemoveConsumer = %v, want nothing", ids(got))
	}
	if got := ids(s.Remove("c2", "q")); !slices.Equal(got, []string{"a"}) || len(s.All()) != 0 {
		t.Fatalf("Remove(c2) = %v, left %d: want [a], nothing left", got, len(s.All()))
	}
}

// TestStashKeepLeases: KeepLeases extends every kept delivery until none
// is kept, then its goroutine ends, and a later call starts a new one.
func TestStashKeepLeases(t *testing.T) {
	var mu sync.Mutex
	var s Stash
	extended := make(chan string, 64)
	keep := func() {
		s.KeepLeases(&mu, time.Millisecond, func() bool { return false }, func(d *Delivery) {
			select {
			case extended <- d.EventID:
			default: // the test has seen enough
			}
		})
	}
	waitExtended := func(want ...string) {
		t.Helper()
		seen := map[string]int{}
		deadline := time.After(30 * time.Second)
		for _, id := range want {
			for seen[id] < 2 {
				select {
				case got := <-extended:
					seen[got]++
				case <-deadline:
					t.Fatalf("extended %v, want each of %v twice", seen, want)
				}
			}
		}
	}
	waitStopped := func() {
		t.Helper()
		waittest.For(t, "KeepLeases to stop with nothing kept", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return !s.keeping
		})
	}
	mu.Lock()
	s.Put("c", "q", deliveries(1, 1))
	keep()
	mu.Unlock()
	waitExtended("a", "b")
	mu.Lock()
	s.Remove("c", "q")
	mu.Unlock()
	waitStopped()
	for len(extended) > 0 {
		<-extended
	}
	mu.Lock()
	s.Put("c", "q", deliveries(3))
	keep()
	mu.Unlock()
	waitExtended("a")
	mu.Lock()
	s.RemoveConsumer("c")
	mu.Unlock()
	waitStopped()
}
