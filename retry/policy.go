// Package retry computes a queue's retry schedule and its delay buckets
// (DESIGN section 5). Everything here is a pure function of a Policy: the
// nominal delay of each retry, the jittered candidate delays, the bucket a
// given event takes, the queue's set of physical buckets and the limits on
// their number.
//
// A Policy does not apply defaults: the configuration layer fills in
// DefaultBackoffMillis and DefaultMaxBackoffMillis (and 0 attempts, 0.0
// jitter) before calling Validate. The results of the schedule functions are
// only meaningful for a Policy that Validate accepts; they never panic on
// an invalid one.
package retry

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Defaults and ranges of the retry settings of a queue (DESIGN section 5).
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
