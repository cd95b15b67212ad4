package retry

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func defaults() Policy {
	return Policy{
		Attempts:         DefaultAttempts,
		BackoffMillis:    DefaultBackoffMillis,
		MaxBackoffMillis: DefaultMaxBackoffMillis,
		JitterRatio:      DefaultJitterRatio,
	}
}

func TestValidateAccepts(t *testing.T) {
	for name, mod := range map[string]func(*Policy){
		"defaults":          func(*Policy) {},
		"100 attempts":      func(p *Policy) { p.Attempts = 100 },
		"jitter 0.5":        func(p *Policy) { p.JitterRatio = 0.5 },
		"negative zero":     func(p *Policy) { p.JitterRatio = math.Copysign(0, -1) },
		"M equals B":        func(p *Policy) { p.BackoffMillis, p.MaxBackoffMillis = 7, 7 },
		"backoff 1 ms":      func(p *Policy) { p.BackoffMillis = 1 },
		"max is MaxInt64":   func(p *Policy) { p.MaxBackoffMillis = math.MaxInt64 },
		"smallest positive": func(p *Policy) { p.JitterRatio = math.SmallestNonzeroFloat64 },
	} {
		p := defaults()
		mod(&p)
		if err := p.Validate(); err != nil {
			t.Errorf("%s: Validate(%+v) = %v, want nil", name, p, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Policy)
		want []FieldError
	}{
		{"attempts 101", func(p *Policy) { p.Attempts = 101 },
			[]FieldError{{"retry_attempts", "101", "must be an integer in 0..100"}}},
		{"attempts -1", func(p *Policy) { p.Attempts = -1 },
			[]FieldError{{"retry_attempts", "-1", "must be an integer in 0..100"}}},
		{"backoff 0 (zero Policy)", func(p *Policy) { *p = Policy{} },
			[]FieldError{
				{"retry_backoff_millis", "0", "must be > 0 (milliseconds)"},
				{"max_retry_backoff_millis", "0", "must be > 0 (milliseconds) and >= retry_backoff_millis"},
			}},
		{"max below backoff", func(p *Policy) { p.MaxBackoffMillis = 999 },
			[]FieldError{{"max_retry_backoff_millis", "999", "must be >= retry_backoff_millis (1000)"}}},
		{"jitter 0.6", func(p *Policy) { p.JitterRatio = 0.6 },
			[]FieldError{{"retry_jitter_ratio", "0.6", "must be a finite number in 0.0..0.5"}}},
		{"jitter just above 0.5", func(p *Policy) { p.JitterRatio = math.Nextafter(0.5, 1) },
			[]FieldError{{"retry_jitter_ratio", "0.5000000000000001", "must be a finite number in 0.0..0.5"}}},
		{"jitter negative", func(p *Policy) { p.JitterRatio = -0.1 },
			[]FieldError{{"retry_jitter_ratio", "-0.1", "must be a finite number in 0.0..0.5"}}},
		{"jitter NaN", func(p *Policy) { p.JitterRatio = math.NaN() },
			[]FieldError{{"retry_jitter_ratio", "NaN", "must be a finite number in 0.0..0.5"}}},
		{"jitter +Inf", func(p *Policy) { p.JitterRatio = math.Inf(1) },
			[]FieldError{{"retry_jitter_ratio", "+Inf", "must be a finite number in 0.0..0.5"}}},
		{"jitter -Inf", func(p *Policy) { p.JitterRatio = math.Inf(-1) },
			[]FieldError{{"retry_jitter_ratio", "-Inf", "must be a finite number in 0.0..0.5"}}},
		{"everything at once", func(p *Policy) {
			*p = Policy{Attempts: 101, BackoffMillis: -5, MaxBackoffMillis: -6, JitterRatio: 0.6}
		}, []FieldError{
			{"retry_attempts", "101", "must be an integer in 0..100"},
			{"retry_backoff_millis", "-5", "must be > 0 (milliseconds)"},
			{"max_retry_backoff_millis", "-6", "must be >= retry_backoff_millis (-5)"},
			{"retry_jitter_ratio", "0.6", "must be a finite number in 0.0..0.5"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := defaults()
			tt.mod(&p)
			err := p.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want %d problems", p, len(tt.want))
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error %v does not wrap ErrInvalidPolicy", err)
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("error %T is not a joined error", err)
			}
			errs := joined.Unwrap()
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d problems (%v), want %d", len(errs), err, len(tt.want))
			}
			for i, e := range errs {
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("problem %d (%v) is %T, not *FieldError", i, e, e)
				}
				if *fe != tt.want[i] {
					t.Errorf("problem %d = %+v, want %+v", i, *fe, tt.want[i])
				}
				if !errors.Is(e, ErrInvalidPolicy) {
					t.Errorf("problem %d does not wrap ErrInvalidPolicy", i)
				}
				msg := tt.want[i].Field + " " + tt.want[i].Value + ": " + tt.want[i].Rule
				if !strings.Contains(err.Error(), msg) {
					t.Errorf("message %q lacks %q", err.Error(), msg)
				}
			}
		})
	}
}
