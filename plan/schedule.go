package plan

import (
	"errors"
	"math/big"
	"strconv"
	"time"

	"github.com/lily-mq/lily/retry"
)

// Ways a Schedule's delays were given (Schedule.Kind).
const (
	// KindInterval is a fixed interval between attempts.
	KindInterval = "interval"
	// KindBackoff is Lily's exponential schedule (docs/design.md §5).
	KindBackoff = "backoff"
	// KindDelays is an explicit list of delays.
	KindDelays = "delays"
	// KindChain is Lily's delay chain, retry_delays_millis (docs/design.md
	// §5): the n-th retry waits the n-th delay, the last one repeating.
	KindChain = "chain"
)

// MaxAttempts is the most total attempts a Schedule may have.
const MaxAttempts = 10000

// Schedule is a retry schedule seen from one message: how many attempts it
// gets in total and how long it waits between two attempts. Build it with
// FixedInterval, Backoff, ExplicitDelays, Chain or FromPolicy.
type Schedule struct {
	// Attempts is the total number of attempts: the first processing plus
	// the retries; len(Delays)+1.
	Attempts int
	// Delays are the waits before attempts 2..Attempts.
	Delays []time.Duration
	// Interval is the fixed interval of a KindInterval schedule, else 0.
	Interval time.Duration
	// Kind is KindInterval, KindBackoff, KindDelays or KindChain.
	Kind string
}

// FixedInterval returns the schedule of attempts (>= 1) total attempts
// spaced by interval (> 0): attempts−1 delays of interval each, so that the
// retry span is (attempts−1)·interval.
func FixedInterval(attempts int, interval time.Duration) (Schedule, error) {
	if err := checkAttempts(attempts); err != nil {
		return Schedule{}, err
	}
	if err := checkDuration("interval", interval, true); err != nil {
		return Schedule{}, err
	}
	d := make([]time.Duration, attempts-1)
	for i := range d {
		d[i] = interval
	}
	return Schedule{Attempts: attempts, Delays: d, Interval: interval, Kind: KindInterval}, nil
}

// Backoff returns Lily's exponential schedule (docs/design.md §5) for
// attempts total attempts, i.e. retry_attempts = attempts−1 retries, with
// retry_backoff_millis = backoffMillis and max_retry_backoff_millis =
// maxBackoffMillis: the delays are the nominal D(n) = min(B·2^(n−1), M) ms
// of retry.Policy for n = 1..attempts−1 (no jitter). attempts must be in
// 1..retry.MaxAttempts+1.
func Backoff(attempts int, backoffMillis, maxBackoffMillis int64) (Schedule, error) {
	if attempts < 1 || attempts > retry.MaxAttempts+1 {
		return Schedule{}, inputErrorf("attempts", strconv.Itoa(attempts),
			"must be an integer in 1..%d with --backoff-millis (total attempts: retry_attempts 0..%d plus the first processing)",
			retry.MaxAttempts+1, retry.MaxAttempts)
	}
	if backoffMillis <= 0 {
		return Schedule{}, inputErrorf("backoff-millis", strconv.FormatInt(backoffMillis, 10),
			"must be > 0 (milliseconds)")
	}
	if maxBackoffMillis < backoffMillis {
		return Schedule{}, inputErrorf("max-backoff-millis", strconv.FormatInt(maxBackoffMillis, 10),
			"must be >= --backoff-millis (%d)", backoffMillis)
	}
	p := retry.Policy{Attempts: attempts - 1, BackoffMillis: backoffMillis, MaxBackoffMillis: maxBackoffMillis}
	return nominal(p, KindBackoff, "max-backoff-millis", func(int64) string { return strconv.FormatInt(maxBackoffMillis, 10) })
}

// Chain returns Lily's delay-chain schedule (retry_delays_millis,
// docs/design.md §5) for attempts total attempts, i.e. retry_attempts =
// attempts−1: the delays are the nominal D(n) of retry.Policy — the n-th
// delay of the chain, its last one repeating — for n = 1..attempts−1 (no
// jitter). attempts must be in 1..retry.MaxAttempts+1; the chain must be
// one retry.Policy accepts (1..retry.MaxAttempts delays, each > 0).
func Chain(attempts int, delaysMillis []int64) (Schedule, error) {
	if attempts < 1 || attempts > retry.MaxAttempts+1 {
		return Schedule{}, inputErrorf("attempts", strconv.Itoa(attempts),
			"must be an integer in 1..%d with --delays-millis (total attempts: retry_attempts 0..%d plus the first processing)",
			retry.MaxAttempts+1, retry.MaxAttempts)
	}
	p := retry.Policy{Attempts: attempts - 1, DelaysMillis: delaysMillis}
	if len(delaysMillis) == 0 {
		return Schedule{}, inputErrorf("delays-millis", "[]", "give at least one delay in milliseconds, e.g. 10000,60000,600000")
	}
	if err := p.Validate(); err != nil {
		var fe *retry.FieldError
		if errors.As(err, &fe) {
			return Schedule{}, inputErrorf("delays-millis", fe.Value, "%s", fe.Rule)
		}
		return Schedule{}, err
	}
	return nominal(p, KindChain, "delays-millis", func(ms int64) string { return strconv.FormatInt(ms, 10) })
}

// nominal is the schedule of kind of p's nominal delays D(1)..D(p.Attempts)
// (p.Attempts+1 total attempts). A delay too large for a time.Duration is
// an input error of flag, whose value is value(the delay in ms).
func nominal(p retry.Policy, kind, flag string, value func(ms int64) string) (Schedule, error) {
	d := make([]time.Duration, 0, p.Attempts)
	for n := 1; n <= p.Attempts; n++ {
		ms := p.Nominal(n)
		if ms > int64(1<<63-1)/int64(time.Millisecond) {
			return Schedule{}, inputErrorf(flag, value(ms),
				"is too large: a delay must fit in a Go time.Duration (about 292 years)")
		}
		d = append(d, time.Duration(ms)*time.Millisecond)
	}
	return Schedule{Attempts: p.Attempts + 1, Delays: d, Kind: kind}, nil
}

// FromPolicy returns the schedule of a queue's retry policy: Chain when
// it sets a delay chain, else Backoff, with p.Attempts+1 total attempts.
func FromPolicy(p retry.Policy) (Schedule, error) {
	if p.Chain() {
		return Chain(p.Attempts+1, p.DelaysMillis)
	}
	return Backoff(p.Attempts+1, p.BackoffMillis, p.MaxBackoffMillis)
}

// ExplicitDelays returns the schedule with the given delays between
// attempts: len(delays)+1 total attempts. Every delay must be >= 0.
func ExplicitDelays(delays []time.Duration) (Schedule, error) {
	if len(delays)+1 > MaxAttempts {
		return Schedule{}, inputErrorf("delays", strconv.Itoa(len(delays))+" delays",
			"at most %d delays are allowed", MaxAttempts-1)
	}
	for _, d := range delays {
		if err := checkDuration("delays", d, false); err != nil {
			return Schedule{}, err
		}
	}
	d := append([]time.Duration{}, delays...)
	return Schedule{Attempts: len(d) + 1, Delays: d, Kind: KindDelays}, nil
}

// checkAttempts reports an InputError unless 1 <= n <= MaxAttempts.
func checkAttempts(n int) error {
	if n < 1 || n > MaxAttempts {
		return inputErrorf("attempts", strconv.Itoa(n),
			"must be an integer in 1..%d (total attempts: the first processing plus the retries)", MaxAttempts)
	}
	return nil
}

// span returns the retry span in seconds, exactly: the sum of the delays.
func (s Schedule) span() *big.Rat {
	t := new(big.Rat)
	for _, d := range s.Delays {
		t.Add(t, seconds(d))
	}
	return t
}

// Span returns the retry span: the sum of the delays between the attempts,
// the time from a message's first attempt to its last if every attempt
// fails at once.
func (s Schedule) Span() time.Duration {
	var t time.Duration
	for _, d := range s.Delays {
		if t > 1<<63-1-d {
			return 1<<63 - 1
		}
		t += d
	}
	return t
}

// delaysSeconds returns the delays in seconds.
func (s Schedule) delaysSeconds() []float64 {
	out := make([]float64, len(s.Delays))
	for i, d := range s.Delays {
		out[i] = float(seconds(d))
	}
	return out
}
