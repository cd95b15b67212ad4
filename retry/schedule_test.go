package retry

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestSchedule(t *testing.T) {
	const maxI = math.MaxInt64
	tests := []struct {
		name       string
		p          Policy
		nominal    []int64   // D(1..A)
		candidates [][]int64 // candidates(1..A)
		buckets    []int64
		span       int64
	}{
		{
			name:       "docs/design.md §5 example, no jitter",
			p:          Policy{Attempts: 3, BackoffMillis: 1000, MaxBackoffMillis: 60000},
			nominal:    []int64{1000, 2000, 4000},
			candidates: [][]int64{{1000}, {2000}, {4000}},
			buckets:    []int64{1000, 2000, 4000},
			span:       7000,
		},
		{
			name:       "docs/design.md §5 example, jitter 0.2",
			p:          Policy{Attempts: 3, BackoffMillis: 1000, MaxBackoffMillis: 60000, JitterRatio: 0.2},
			nominal:    []int64{1000, 2000, 4000},
			candidates: [][]int64{{1000, 1200}, {1600, 2000, 2400}, {3200, 4000, 4800}},
			buckets:    []int64{1000, 1200, 1600, 2000, 2400, 3200, 4000, 4800},
			span:       7000,
		},
		{
			name:       "no retries",
			p:          Policy{Attempts: 0, BackoffMillis: 1000, MaxBackoffMillis: 60000, JitterRatio: 0.2},
			nominal:    nil,
			candidates: nil,
			buckets:    []int64{},
			span:       0,
		},
		{
			name:       "capped at M",
			p:          Policy{Attempts: 5, BackoffMillis: 1000, MaxBackoffMillis: 5000},
			nominal:    []int64{1000, 2000, 4000, 5000, 5000},
			candidates: [][]int64{{1000}, {2000}, {4000}, {5000}, {5000}},
			buckets:    []int64{1000, 2000, 4000, 5000},
			span:       17000,
		},
		{
			name:    "capped at M with jitter: upper candidate clamped to M",
			p:       Policy{Attempts: 5, BackoffMillis: 1000, MaxBackoffMillis: 5000, JitterRatio: 0.2},
			nominal: []int64{1000, 2000, 4000, 5000, 5000},
			candidates: [][]int64{
				{1000, 1200}, {1600, 2000, 2400}, {3200, 4000, 4800}, {4000, 5000}, {4000, 5000},
			},
			buckets: []int64{1000, 1200, 1600, 2000, 2400, 3200, 4000, 4800, 5000},
			span:    17000,
		},
		{
			name:       "maximum jitter 0.5",
			p:          Policy{Attempts: 2, BackoffMillis: 1000, MaxBackoffMillis: 60000, JitterRatio: 0.5},
			nominal:    []int64{1000, 2000},
			candidates: [][]int64{{1000, 1500}, {1000, 2000, 3000}},
			buckets:    []int64{1000, 1500, 2000, 3000},
			span:       3000,
		},
		{
			name:       "M equals B: one bucket whatever the jitter",
			p:          Policy{Attempts: 5, BackoffMillis: 500, MaxBackoffMillis: 500, JitterRatio: 0.3},
			nominal:    []int64{500, 500, 500, 500, 500},
			candidates: [][]int64{{500}, {500}, {500}, {500}, {500}},
			buckets:    []int64{500},
			span:       2500,
		},
		{
			name:       "tiny jitter rounds back onto D",
			p:          Policy{Attempts: 2, BackoffMillis: 1000, MaxBackoffMillis: 60000, JitterRatio: 1e-9},
			nominal:    []int64{1000, 2000},
			candidates: [][]int64{{1000}, {2000}},
			buckets:    []int64{1000, 2000},
			span:       3000,
		},
		{
			name:       "half away from zero: 7·1.5 = 10.5 → 11",
			p:          Policy{Attempts: 1, BackoffMillis: 7, MaxBackoffMillis: 1000, JitterRatio: 0.5},
			nominal:    []int64{7},
			candidates: [][]int64{{7, 11}},
			buckets:    []int64{7, 11},
			span:       7,
		},
		{
			name:       "half away from zero: 1001·0.5 = 500.5 → 501",
			p:          Policy{Attempts: 11, BackoffMillis: 1, MaxBackoffMillis: 1001, JitterRatio: 0.5},
			nominal:    []int64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1001},
			candidates: [][]int64{{1, 2}, {1, 2, 3}, {2, 4, 6}, {4, 8, 12}, {8, 16, 24}, {16, 32, 48}, {32, 64, 96}, {64, 128, 192}, {128, 256, 384}, {256, 512, 768}, {501, 1001}},
			buckets:    []int64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 501, 512, 768, 1001},
			span:       2024,
		},
		{
			// float64 would give 50·1.15 = 57.49999999999999 → 57 and
			// 50·0.85 = 42.5 → 43; the decimal values are 57.5 and 42.5.
			name:       "exact decimal: 50·(1±0.15) = 42.5, 57.5 → 43, 58",
			p:          Policy{Attempts: 2, BackoffMillis: 25, MaxBackoffMillis: 1000, JitterRatio: 0.15},
			nominal:    []int64{25, 50},
			candidates: [][]int64{{25, 29}, {43, 50, 58}},
			buckets:    []int64{25, 29, 43, 50, 58},
			span:       75,
		},
		{
			// float64 would give 45·0.7 = 31.499999999999996 → 31.
			name:       "exact decimal: 45·0.7 = 31.5 → 32",
			p:          Policy{Attempts: 7, BackoffMillis: 1, MaxBackoffMillis: 45, JitterRatio: 0.3},
			nominal:    []int64{1, 2, 4, 8, 16, 32, 45},
			candidates: [][]int64{{1}, {1, 2, 3}, {3, 4, 5}, {6, 8, 10}, {11, 16, 21}, {22, 32, 42}, {32, 45}},
			buckets:    []int64{1, 2, 3, 4, 5, 6, 8, 10, 11, 16, 21, 22, 32, 42, 45},
			span:       108,
		},
		{
			name:    "100 attempts from 1 ms to MaxInt64: no overflow, span saturates",
			p:       Policy{Attempts: 100, BackoffMillis: 1, MaxBackoffMillis: maxI},
			nominal: append(powersOfTwo(63), repeat(maxI, 37)...),
			buckets: append(powersOfTwo(63), maxI),
			span:    maxI,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			var nominal []int64
			for n := 1; n <= tt.p.Attempts; n++ {
				nominal = append(nominal, tt.p.Nominal(n))
			}
			if !slices.Equal(nominal, tt.nominal) {
				t.Errorf("Nominal(1..%d) = %v, want %v", tt.p.Attempts, nominal, tt.nominal)
			}
			if tt.candidates != nil {
				for n := 1; n <= tt.p.Attempts; n++ {
					if got, want := tt.p.Candidates(n), tt.candidates[n-1]; !slices.Equal(got, want) {
						t.Errorf("Candidates(%d) = %v, want %v", n, got, want)
					}
				}
			}
			got := tt.p.Buckets()
			if got == nil || !slices.Equal(got, tt.buckets) {
				t.Errorf("Buckets() = %#v, want %v", got, tt.buckets)
			}
			if got := tt.p.Span(); got != tt.span {
				t.Errorf("Span() = %d, want %d", got, tt.span)
			}
		})
	}
}

func powersOfTwo(k int) []int64 {
	out := make([]int64, k)
	for i := range out {
		out[i] = 1 << i
	}
	return out
}

func repeat(v int64, k int) []int64 {
	out := make([]int64, k)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestNominalLargeValues(t *testing.T) {
	p := Policy{Attempts: 100, BackoffMillis: 1000, MaxBackoffMillis: math.MaxInt64, JitterRatio: 0.5}
	for n := 1; n <= 100; n++ {
		d := p.Nominal(n)
		if d < 1000 || d > math.MaxInt64 {
			t.Fatalf("Nominal(%d) = %d out of range", n, d)
		}
		if n > 1 && d < p.Nominal(n-1) {
			t.Fatalf("Nominal(%d) = %d < Nominal(%d) = %d", n, d, n-1, p.Nominal(n-1))
		}
	}
	if got := p.Nominal(54); got != 1000<<53 {
		t.Errorf("Nominal(54) = %d, want %d", got, int64(1000)<<53)
	}
	if got := p.Nominal(55); got != math.MaxInt64 {
		t.Errorf("Nominal(55) = %d, want MaxInt64 (1000·2^54 overflows)", got)
	}
	// At D = MaxInt64 the products must be exact: MaxInt64·0.5 =
	// 4611686018427387903.5 rounds up; MaxInt64·1.5 is clamped to M.
	want := []int64{4611686018427387904, math.MaxInt64}
	if got := p.Candidates(100); !slices.Equal(got, want) {
		t.Errorf("Candidates(100) = %v, want %v", got, want)
	}
	if got := p.Span(); got != math.MaxInt64 {
		t.Errorf("Span() = %d, want saturated MaxInt64", got)
	}
}

func TestNominalBelowOne(t *testing.T) {
	p := Policy{Attempts: 3, BackoffMillis: 1000, MaxBackoffMillis: 60000}
	for _, n := range []int{0, -1, math.MinInt} {
		if got := p.Nominal(n); got != 1000 {
			t.Errorf("Nominal(%d) = %d, want B = 1000", n, got)
		}
	}
}

// fnv1a64 is FNV-1a 64 written out, independent of hash/fnv.
func fnv1a64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func TestFNVReference(t *testing.T) {
	// Published test vectors of FNV-1a 64.
	for s, want := range map[string]uint64{
		"":           0xcbf29ce484222325,
		"a":          0xaf63dc4c8601ec8c,
		"foobar":     0x85944171f73967e8,
		"order-42:1": 18223004903770081441, // computed separately in Python
	} {
		if got := fnv1a64(s); got != want {
			t.Errorf("fnv1a64(%q) = %#x, want %#x", s, got, want)
		}
	}
}

func TestChooseConcrete(t *testing.T) {
	p := Policy{Attempts: 3, BackoffMillis: 1000, MaxBackoffMillis: 60000, JitterRatio: 0.2}
	// h("order-42:1") mod 2 = 1, h("order-42:2") mod 3 = 1, h("order-42:3") mod 3 = 2.
	want := []int64{1200, 2000, 4800}
	for n := 1; n <= 3; n++ {
		if got := p.Choose("order-42", n); got != want[n-1] {
			t.Errorf("Choose(order-42, %d) = %d, want %d", n, got, want[n-1])
		}
	}
}

func TestChooseMatchesHandWrittenFNV(t *testing.T) {
	p := Policy{Attempts: 12, BackoffMillis: 100, MaxBackoffMillis: 60000, JitterRatio: 0.25}
	for i := range 500 {
		id := fmt.Sprintf("0190a5c2-7e1b-7%03x-8000-%012d", i, i*7919)
		for n := 1; n <= p.Attempts; n++ {
			c := p.Candidates(n)
			want := c[fnv1a64(id+":"+fmt.Sprint(n))%uint64(len(c))]
			if got := p.Choose(id, n); got != want {
				t.Fatalf("Choose(%q, %d) = %d, want %d (candidates %v)", id, n, got, want, c)
			}
		}
	}
}

func TestChooseDeterministicMemberAndSpread(t *testing.T) {
	p := Policy{Attempts: 6, BackoffMillis: 1000, MaxBackoffMillis: 20000, JitterRatio: 0.2}
	for n := 1; n <= p.Attempts; n++ {
		c := p.Candidates(n)
		seen := map[int64]int{}
		for i := range 3000 {
			id := fmt.Sprintf("evt-%d", i)
			got := p.Choose(id, n)
			if !slices.Contains(c, got) {
				t.Fatalf("Choose(%q, %d) = %d, not in candidates %v", id, n, got, c)
			}
			if again := p.Choose(id, n); again != got {
				t.Fatalf("Choose(%q, %d) not deterministic: %d then %d", id, n, got, again)
			}
			seen[got]++
		}
		// Every candidate is used, and none by much more than its share.
		for _, d := range c {
			if share := seen[d]; share < 3000/len(c)/2 {
				t.Errorf("n=%d: candidate %d chosen %d times of 3000 (candidates %v)", n, d, share, c)
			}
		}
	}
}

func TestChooseWithoutJitter(t *testing.T) {
	p := Policy{Attempts: 3, BackoffMillis: 1000, MaxBackoffMillis: 60000}
	for _, id := range []string{"", "a", "order-42"} {
		for n := 1; n <= 3; n++ {
			if got, want := p.Choose(id, n), p.Nominal(n); got != want {
				t.Errorf("Choose(%q, %d) = %d, want D = %d", id, n, got, want)
			}
		}
	}
}

func TestCandidatesAreSortedUniqueClamped(t *testing.T) {
	for _, r := range []float64{0, 0.01, 0.1, 0.15, 0.2, 0.3, 1.0 / 3, 0.45, 0.5} {
		p := Policy{Attempts: 40, BackoffMillis: 3, MaxBackoffMillis: 1 << 30, JitterRatio: r}
		for n := 1; n <= p.Attempts; n++ {
			c := p.Candidates(n)
			if len(c) == 0 || len(c) > 3 {
				t.Fatalf("r=%v n=%d: %v", r, n, c)
			}
			if !slices.Contains(c, p.Nominal(n)) {
				t.Errorf("r=%v n=%d: %v lacks D=%d", r, n, c, p.Nominal(n))
			}
			for i, d := range c {
				if d < p.BackoffMillis || d > p.MaxBackoffMillis {
					t.Errorf("r=%v n=%d: %d outside [B, M]", r, n, d)
				}
				if i > 0 && c[i-1] >= d {
					t.Errorf("r=%v n=%d: %v not strictly ascending", r, n, c)
				}
			}
		}
	}
}
