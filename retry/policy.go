// Package retry computes a queue's retry schedule and its delay buckets
// (docs/design.md §5). Everything here is a pure function of a Policy: the
// nominal delay of each retry, the jittered candidate delays, the bucket a
// given event takes, the queue's set of physical buckets and the limits on
// their number.
//
// A Policy has one of two forms. The exponential form (docs/design.md §5):
// D(n) = min(B·2^(n−1), M). The chain form (retry_delays_millis, the
// 10 s → 1 min → 10 min of 000_* and 002_*): D(n) = d_n, the last delay
// repeating when retry_attempts is longer than the chain. Jitter, the
// choice of a bucket and the bucket limits (MaxBucketsPerQueue,
// MaxBucketsPerTopology) are the same for both; the jittered candidates are
// clamped to [B, M] for the exponential form and to [min(chain),
// max(chain)] for a chain, so that jitter never leaves the range of delays
// the queue wrote down. A queue sets one form, never both: Validate refuses
// a chain beside a backoff or a cap, naming both settings.
//
// A Policy does not apply defaults: the configuration layer fills in
// DefaultBackoffMillis and DefaultMaxBackoffMillis for the exponential form
// (and 0 attempts, 0.0 jitter) before calling Validate; it leaves them 0
// when the queue sets a chain. The results of the schedule functions are
// only meaningful for a Policy that Validate accepts; they never panic on
// an invalid one.
package retry

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Defaults and ranges of the retry settings of a queue (docs/design.md §5).
const (
	// DefaultAttempts is the default retry_attempts: no framework retry, a
	// transient error goes straight to the dead-letter destination.
	DefaultAttempts = 0
	// DefaultBackoffMillis is the default retry_backoff_millis.
	DefaultBackoffMillis int64 = 1000
	// DefaultMaxBackoffMillis is the default max_retry_backoff_millis.
	DefaultMaxBackoffMillis int64 = 60000
	// DefaultJitterRatio is the default retry_jitter_ratio: no jitter.
	DefaultJitterRatio = 0.0

	// MaxAttempts is the largest allowed retry_attempts.
	MaxAttempts = 100
	// MaxJitterRatio is the largest allowed retry_jitter_ratio.
	MaxJitterRatio = 0.5
)

// ErrInvalidPolicy is wrapped by every error that Validate, CheckBuckets and
// CheckTopology return; test for it with errors.Is.
var ErrInvalidPolicy = errors.New("invalid retry policy")

// Policy is the retry schedule of one queue. Field comments give the TOML
// name of each setting and its default, which the caller applies: the zero
// Policy is not valid (its backoff is 0).
type Policy struct {
	// Attempts (retry_attempts) is A, the number of framework retries after
	// the first processing, numbered n = 1..A; 0..100. Defaults to 0.
	Attempts int
	// BackoffMillis (retry_backoff_millis) is B, the delay before the first
	// retry and the smallest delay of any retry, in milliseconds; > 0.
	// Defaults to 1000.
	BackoffMillis int64
	// MaxBackoffMillis (max_retry_backoff_millis) is M, the cap on every
	// delay, in milliseconds; >= BackoffMillis. Defaults to 60000.
	MaxBackoffMillis int64
	// JitterRatio (retry_jitter_ratio) is r: each retry may take the nominal
	// delay scaled by 1−r, 1 or 1+r; finite, 0.0..0.5. Defaults to 0.0.
	JitterRatio float64
	// DelaysMillis (retry_delays_millis) is an explicit delay chain
	// [d1, d2, ...] in milliseconds, the alternative to BackoffMillis and
	// MaxBackoffMillis (000_* and 002_* use [10000, 60000, 600000]): retry n
	// waits D(n) = d_n, and the last delay repeats when Attempts is longer
	// than the chain. Each delay is > 0; at most MaxAttempts delays. A
	// Policy sets one form: with a chain, BackoffMillis and
	// MaxBackoffMillis must be 0 (unset). Jitter applies on top; its
	// candidates are clamped to [min(chain), max(chain)], the chain's own
	// smallest and largest delays playing the roles of B and M. Defaults to
	// none (the exponential form).
	DelaysMillis []int64
}

// Chain reports whether p uses an explicit delay chain (DelaysMillis)
// instead of the exponential form.
func (p Policy) Chain() bool { return len(p.DelaysMillis) > 0 }

// bounds returns the clamp of the jittered candidates: [B, M], or, for a
// chain, [min(chain), max(chain)].
func (p Policy) bounds() (lo, hi int64) {
	if !p.Chain() {
		return p.BackoffMillis, p.MaxBackoffMillis
	}
	lo, hi = p.DelaysMillis[0], p.DelaysMillis[0]
	for _, d := range p.DelaysMillis[1:] {
		lo, hi = min(lo, d), max(hi, d)
	}
	return lo, hi
}

// FieldError is one problem found by Validate: the setting, by its TOML
// name, the value it had and the rule it broke. It wraps ErrInvalidPolicy.
type FieldError struct {
	// Field is the TOML name of the setting, e.g. "retry_jitter_ratio".
	Field string
	// Value is the offending value as text, e.g. "0.6" or "NaN".
	Value string
	// Rule states the allowed range, e.g. "must be a finite number in
	// 0.0..0.5"; it may name other settings by their TOML names.
	Rule string
}

// Error returns "<field> <value>: <rule>".
func (e *FieldError) Error() string {
	return e.Field + " " + e.Value + ": " + e.Rule
}

// Unwrap returns ErrInvalidPolicy.
func (e *FieldError) Unwrap() error { return ErrInvalidPolicy }

// Validate checks every setting and returns all problems at once, joined
// with errors.Join; each is a *FieldError wrapping ErrInvalidPolicy. It
// returns nil for a valid Policy. It does not apply defaults.
func (p Policy) Validate() error {
	var errs []error
	if p.Attempts < 0 || p.Attempts > MaxAttempts {
		errs = append(errs, &FieldError{
			Field: "retry_attempts",
			Value: strconv.Itoa(p.Attempts),
			Rule:  fmt.Sprintf("must be an integer in 0..%d", MaxAttempts),
		})
	}
	if p.Chain() {
		errs = append(errs, p.validateChain()...)
	} else {
		errs = append(errs, p.validateBackoff()...)
	}
	r := p.JitterRatio
	if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > MaxJitterRatio {
		errs = append(errs, &FieldError{
			Field: "retry_jitter_ratio",
			Value: strconv.FormatFloat(r, 'g', -1, 64),
			Rule:  "must be a finite number in 0.0..0.5",
		})
	}
	return errors.Join(errs...)
}

// validateChain checks the explicit delay chain, and that the exponential
// settings are not set beside it.
func (p Policy) validateChain() []error {
	var errs []error
	if p.BackoffMillis != 0 || p.MaxBackoffMillis != 0 {
		var set []string
		if p.BackoffMillis != 0 {
			set = append(set, "retry_backoff_millis = "+strconv.FormatInt(p.BackoffMillis, 10))
		}
		if p.MaxBackoffMillis != 0 {
			set = append(set, "max_retry_backoff_millis = "+strconv.FormatInt(p.MaxBackoffMillis, 10))
		}
		errs = append(errs, &FieldError{
			Field: "retry_delays_millis",
			Value: formatChain(p.DelaysMillis),
			Rule: "cannot be combined with " + strings.Join(set, " and ") +
				": a queue sets one form, either retry_delays_millis or retry_backoff_millis/max_retry_backoff_millis; remove one",
		})
	}
	if len(p.DelaysMillis) > MaxAttempts {
		errs = append(errs, &FieldError{
			Field: "retry_delays_millis",
			Value: strconv.Itoa(len(p.DelaysMillis)) + " delays",
			Rule:  fmt.Sprintf("at most %d delays (one per retry; the last repeats for longer retry_attempts)", MaxAttempts),
		})
	}
	for i, d := range p.DelaysMillis {
		if d <= 0 {
			errs = append(errs, &FieldError{
				Field: "retry_delays_millis",
				Value: formatChain(p.DelaysMillis),
				Rule:  fmt.Sprintf("delay %d is %d: every delay must be > 0 (milliseconds)", i+1, d),
			})
		}
	}
	return errs
}

// formatChain writes a chain as TOML does: [10000, 60000].
func formatChain(ds []int64) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// validateBackoff checks B and M of the exponential form.
func (p Policy) validateBackoff() []error {
	var errs []error
	if p.BackoffMillis <= 0 {
		errs = append(errs, &FieldError{
			Field: "retry_backoff_millis",
			Value: strconv.FormatInt(p.BackoffMillis, 10),
			Rule:  "must be > 0 (milliseconds)",
		})
	}
	switch {
	case p.MaxBackoffMillis < p.BackoffMillis:
		errs = append(errs, &FieldError{
			Field: "max_retry_backoff_millis",
			Value: strconv.FormatInt(p.MaxBackoffMillis, 10),
			Rule:  fmt.Sprintf("must be >= retry_backoff_millis (%d)", p.BackoffMillis),
		})
	case p.MaxBackoffMillis <= 0:
		errs = append(errs, &FieldError{
			Field: "max_retry_backoff_millis",
			Value: strconv.FormatInt(p.MaxBackoffMillis, 10),
			Rule:  "must be > 0 (milliseconds) and >= retry_backoff_millis",
		})
	}
	return errs
}
