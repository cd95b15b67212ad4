package retry

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestChainSchedule: D(n) = d_n of retry_delays_millis, the last delay
// repeating; jitter on top, clamped to [min(chain), max(chain)].
func TestChainSchedule(t *testing.T) {
	chain := []int64{10000, 60000, 600000} // 000_*, 002_*: 10 s -> 1 min -> 10 min
	tests := []struct {
		name       string
		p          Policy
		nominal    []int64
		candidates [][]int64
		buckets    []int64
		span       int64
	}{
		{
			name:       "seed chain",
			p:          Policy{Attempts: 3, DelaysMillis: chain},
			nominal:    []int64{10000, 60000, 600000},
			candidates: [][]int64{{10000}, {60000}, {600000}},
			buckets:    []int64{10000, 60000, 600000},
			span:       670000,
		},
		{
			name:       "last delay repeats",
			p:          Policy{Attempts: 5, DelaysMillis: chain},
			nominal:    []int64{10000, 60000, 600000, 600000, 600000},
			candidates: [][]int64{{10000}, {60000}, {600000}, {600000}, {600000}},
			buckets:    []int64{10000, 60000, 600000},
			span:       1870000,
		},
		{
			name:       "shorter than the chain",
			p:          Policy{Attempts: 2, DelaysMillis: chain},
			nominal:    []int64{10000, 60000},
			candidates: [][]int64{{10000}, {60000}},
			buckets:    []int64{10000, 60000},
			span:       70000,
		},
		{
			name:    "jitter clamped to the chain's range",
			p:       Policy{Attempts: 4, DelaysMillis: chain, JitterRatio: 0.2},
			nominal: []int64{10000, 60000, 600000, 600000},
			// 8000 clamps up to 10000; 720000 clamps down to 600000.
			candidates: [][]int64{{10000, 12000}, {48000, 60000, 72000}, {480000, 600000}, {480000, 600000}},
			buckets:    []int64{10000, 12000, 48000, 60000, 72000, 480000, 600000},
			span:       1270000,
		},
		{
			name:       "not monotonic",
			p:          Policy{Attempts: 3, DelaysMillis: []int64{5000, 1000, 3000}},
			nominal:    []int64{5000, 1000, 3000},
			candidates: [][]int64{{5000}, {1000}, {3000}},
			buckets:    []int64{1000, 3000, 5000},
			span:       9000,
		},
		{
			name:    "no retries",
			p:       Policy{Attempts: 0, DelaysMillis: chain},
			buckets: []int64{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			var nom []int64
			var cands [][]int64
			for n := 1; n <= tt.p.Attempts; n++ {
				nom = append(nom, tt.p.Nominal(n))
				cands = append(cands, tt.p.Candidates(n))
				// Choose picks one of the candidates.
				if c := tt.p.Choose("evt", n); !slices.Contains(tt.p.Candidates(n), c) {
					t.Errorf("Choose(n=%d) = %d, not a candidate", n, c)
				}
			}
			if !slices.Equal(nom, tt.nominal) {
				t.Errorf("nominal %v, want %v", nom, tt.nominal)
			}
			if len(cands) != len(tt.candidates) {
				t.Fatalf("candidates %v, want %v", cands, tt.candidates)
			}
			for i := range cands {
				if !slices.Equal(cands[i], tt.candidates[i]) {
					t.Errorf("candidates(%d) %v, want %v", i+1, cands[i], tt.candidates[i])
				}
			}
			if b := tt.p.Buckets(); !slices.Equal(b, tt.buckets) {
				t.Errorf("buckets %v, want %v", b, tt.buckets)
			}
			if s := tt.p.Span(); s != tt.span {
				t.Errorf("span %d, want %d", s, tt.span)
			}
		})
	}
}

// TestChainValidate: one form per queue, naming both settings; every delay
// > 0; at most MaxAttempts delays.
func TestChainValidate(t *testing.T) {
	tests := []struct {
		p    Policy
		want []string
	}{
		{Policy{Attempts: 3, DelaysMillis: []int64{10000, 60000}, BackoffMillis: 1000},
			[]string{"retry_delays_millis [10000, 60000]: cannot be combined with retry_backoff_millis = 1000", "a queue sets one form"}},
		{Policy{Attempts: 3, DelaysMillis: []int64{10000}, MaxBackoffMillis: 60000},
			[]string{"cannot be combined with max_retry_backoff_millis = 60000"}},
		{Policy{Attempts: 3, DelaysMillis: []int64{10000}, BackoffMillis: 1000, MaxBackoffMillis: 60000},
			[]string{"retry_backoff_millis = 1000 and max_retry_backoff_millis = 60000"}},
		{Policy{Attempts: 3, DelaysMillis: []int64{10000, 0, -5}},
			[]string{"delay 2 is 0: every delay must be > 0", "delay 3 is -5"}},
		{Policy{Attempts: 3, DelaysMillis: make([]int64, MaxAttempts+1)},
			[]string{"retry_delays_millis 101 delays: at most 100 delays"}},
		{Policy{Attempts: 3, DelaysMillis: []int64{1000}, JitterRatio: 0.7},
			[]string{"retry_jitter_ratio 0.7"}},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if err == nil || !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%+v: err %v, want invalid", tt.p, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: err %q lacks %q", tt.p, err, w)
			}
		}
	}
}

// TestChainBucketLimit: the 32-bucket limit applies to a chain (with
// jitter, each distinct delay can take three buckets).
func TestChainBucketLimit(t *testing.T) {
	var chain []int64
	for i := range 13 {
		chain = append(chain, int64(1000*(i+1)*10))
	}
	p := Policy{Attempts: len(chain), DelaysMillis: chain, JitterRatio: 0.1}
	if n := len(p.Buckets()); n <= MaxBucketsPerQueue {
		t.Fatalf("setup: %d buckets", n)
	}
	err := CheckBuckets("q", p)
	if !errors.Is(err, ErrTooManyBuckets) || !strings.Contains(err.Error(), `queue "q" needs`) ||
		!strings.Contains(err.Error(), "shorten retry_delays_millis") {
		t.Errorf("CheckBuckets: %v", err)
	}
	if err := CheckBuckets("q", Policy{Attempts: 100, DelaysMillis: []int64{1000, 2000}, JitterRatio: 0.5}); err != nil {
		t.Errorf("a short chain with 100 attempts: %v", err)
	}
}
