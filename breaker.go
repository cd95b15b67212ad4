package lily

import (
	"sync"
	"time"
)

// BreakerState is the state of a consumer's circuit breaker.
type BreakerState string

// The breaker states.
const (
	// BreakerClosed: full speed.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: the consumer fetches nothing; failures of deliveries
	// already in flight are held without spending a retry.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: one probe delivery at a time decides.
	BreakerHalfOpen BreakerState = "half_open"
)

// breakerBuckets is the resolution of the sliding window.
const breakerBuckets = 10

// breaker is the consumer's circuit breaker (docs/design.md §4): transient failures
// over a sliding time window; permanent errors are the message's fault and
// are not counted. It opens when failures reach the ratio with at least
// min outcomes in the window, lets one probe through after the cooldown,
// and closes on the probe's success.
type breaker struct {
	ratio    float64
	min      int
	window   time.Duration
	cooldown time.Duration
	now      func() time.Time
	onChange func(from, to BreakerState)

	mu       sync.Mutex
	state    BreakerState
	openedAt time.Time
	probe    uint64 // the token of the probe in flight; 0: none
	seq      uint64 // the last token issued
	buckets  [breakerBuckets]struct {
		start     time.Time
		ok, fails int
	}
}

func newBreaker(q QueueConfig, now func() time.Time, onChange func(from, to BreakerState)) *breaker {
	return &breaker{
		ratio: q.Settings().BreakerFailureRatio, min: q.Settings().BreakerMinRequests,
		window:   time.Duration(q.Settings().BreakerWindowMillis) * time.Millisecond,
		cooldown: time.Duration(q.Settings().BreakerCooldownMillis) * time.Millisecond,
		now:      now, onChange: onChange, state: BreakerClosed,
	}
}

// set changes the state; the caller holds mu. onChange runs after unlock.
func (b *breaker) set(to BreakerState) func() {
	from := b.state
	if from == to {
		return func() {}
	}
	b.state = to
	if to == BreakerOpen {
		b.openedAt = b.now()
		b.buckets = [breakerBuckets]struct {
			start     time.Time
			ok, fails int
		}{}
	}
	return func() {
		if b.onChange != nil {
			b.onChange(from, to)
		}
	}
}

// record counts one outcome (success, or a transient failure) of a
// delivery; probe is the delivery's probe token (0 if it is not the
// half-open probe), whose outcome alone decides in that state (other
// deliveries still finishing are ignored there).
func (b *breaker) record(success bool, probe uint64) {
	b.mu.Lock()
	var notify func()
	switch b.state {
	case BreakerHalfOpen:
		if probe == 0 || probe != b.probe {
			break
		}
		b.probe = 0
		if success {
			notify = b.set(BreakerClosed)
		} else {
			notify = b.set(BreakerOpen)
		}
	case BreakerClosed:
		now := b.now()
		width := b.window / breakerBuckets
		i := int(now.UnixNano()/int64(width)) % breakerBuckets
		bk := &b.buckets[i]
		if now.Sub(bk.start) >= width {
			bk.start, bk.ok, bk.fails = now.Truncate(width), 0, 0
		}
		if success {
			bk.ok++
		} else {
			bk.fails++
		}
		ok, fails := 0, 0
		for _, x := range b.buckets {
			if now.Sub(x.start) < b.window {
				ok, fails = ok+x.ok, fails+x.fails
			}
		}
		if total := ok + fails; !success && total >= b.min && float64(fails) >= b.ratio*float64(total) {
			notify = b.set(BreakerOpen)
		}
	}
	b.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// neutral ends a probe whose outcome says nothing about the dependency
// (a permanent error): the next fetch probes again.
func (b *breaker) neutral(probe uint64) { b.endProbe(probe) }

// current returns the state.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// gate tells the fetch loop what it may do now: fetch up to max (0 = as
// the prefetch allows), or wait (probe in flight, or open until the
// cooldown ends: then wait is how long). A breaker past its cooldown turns
// half-open and allows one probe.
//
// A probe is a token; it ends with the probe's outcome (record), or when
// its delivery is settled without one (endProbe, from the ticket).
func (b *breaker) gate() (probe uint64, wait time.Duration, blocked bool) {
	b.mu.Lock()
	var notify func()
	defer func() {
		b.mu.Unlock()
		if notify != nil {
			notify()
		}
	}()
	switch b.state {
	case BreakerOpen:
		left := b.cooldown - b.now().Sub(b.openedAt)
		if left > 0 {
			return 0, left, true
		}
		notify = b.set(BreakerHalfOpen)
		fallthrough
	case BreakerHalfOpen:
		if b.probe != 0 {
			return 0, 0, true
		}
		b.seq++
		b.probe = b.seq
		return b.probe, 0, false
	}
	return 0, 0, false
}

// endProbe returns the probe token tok (the fetch brought nothing, or the
// probe was settled without an outcome). A token already ended, or 0, and
// a nil breaker are ignored.
func (b *breaker) endProbe(tok uint64) {
	if b == nil || tok == 0 {
		return
	}
	b.mu.Lock()
	if b.probe == tok {
		b.probe = 0
	}
	b.mu.Unlock()
}
