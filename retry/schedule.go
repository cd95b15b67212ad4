package retry

import (
	"hash/fnv"
	"math"
	"math/big"
	"slices"
	"strconv"
)

// Nominal returns D(n), the nominal delay in milliseconds of retry n:
// min(B·2^(n−1), M), or d_n of a chain (its last delay for n past its end).
// It never overflows: doubling stops as soon as the delay reaches M,
// whatever n is. n < 1 is treated as 1.
func (p Policy) Nominal(n int) int64 {
	if p.Chain() {
		return p.DelaysMillis[min(max(n, 1), len(p.DelaysMillis))-1]
	}
	b, m := p.BackoffMillis, p.MaxBackoffMillis
	if b >= m {
		return m
	}
	d := b
	for i := 1; i < n; i++ {
		if d > m/2 { // 2·d > m: the cap is reached, and 2·d could overflow.
			return m
		}
		d *= 2
	}
	return d
}

// Candidates returns the delays, in milliseconds, that retry n may take,
// ascending and without duplicates. With no jitter it is {D(n)}; otherwise
// {round(D·(1−r)), D, round(D·(1+r))}, each clamped to [B, M] — for a
// chain to [min(chain), max(chain)] — where round is half away from zero.
//
// The products are computed exactly on the decimal value of r (its shortest
// representation, as written in a configuration file), not in float64: with
// r = 0.15 and D = 50, D·(1+r) is 57.5 and rounds to 58, where float64
// arithmetic would give 57.49999999999999 and 57.
func (p Policy) Candidates(n int) []int64 {
	d := p.Nominal(n)
	r, ok := jitterRat(p.JitterRatio)
	if !ok {
		return []int64{d}
	}
	c := []int64{
		p.clamp(scaleRound(d, r, false)),
		d,
		p.clamp(scaleRound(d, r, true)),
	}
	slices.Sort(c)
	return slices.Compact(c)
}

// Choose returns the delay, in milliseconds, of retry n of the event
// eventID: Candidates(n)[h mod len], where h is the FNV-1a 64-bit hash of
// the bytes eventID + ":" + decimal(n). The same event and retry always
// take the same bucket, and different events spread over the candidates.
func (p Policy) Choose(eventID string, n int) int64 {
	c := p.Candidates(n)
	if len(c) == 1 {
		return c[0]
	}
	return c[chooseIndex(eventID, n, len(c))]
}

// chooseIndex returns FNV-1a-64(eventID + ":" + decimal(n)) mod size.
func chooseIndex(eventID string, n, size int) int {
	h := fnv.New64a()
	h.Write([]byte(eventID))
	h.Write([]byte{':'})
	h.Write(strconv.AppendInt(nil, int64(n), 10))
	return int(h.Sum64() % uint64(size))
}

// Buckets returns the queue's physical delay buckets in milliseconds: the
// union of Candidates(n) for n = 1..A, ascending, equal delays once. It is
// empty (not nil) when A = 0: such a queue declares no retry bucket.
func (p Policy) Buckets() []int64 {
	out := []int64{}
	for n := 1; n <= p.Attempts; n++ {
		out = append(out, p.Candidates(n)...)
		if p.Chain() && n >= len(p.DelaysMillis) {
			break // every later retry repeats the chain's last delay.
		}
		if !p.Chain() && p.Nominal(n) >= p.MaxBackoffMillis {
			break // every later retry has D = M and the same candidates.
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Span returns the retry span in milliseconds: the sum of the nominal
// delays D(1..A), the time a message spends waiting in buckets if every
// retry fails (docs/design.md §10 calls it S). It saturates at math.MaxInt64
// instead of overflowing.
func (p Policy) Span() int64 {
	var s int64
	for n := 1; n <= p.Attempts; n++ {
		d := p.Nominal(n)
		if d > 0 && s > math.MaxInt64-d {
			return math.MaxInt64
		}
		s += d
	}
	return s
}

// jitterRat returns r as an exact rational of its shortest decimal
// representation, and false when there is no jitter to apply (r = 0, or r
// not finite, which Validate rejects).
func jitterRat(r float64) (*big.Rat, bool) {
	if r == 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return nil, false
	}
	q, ok := new(big.Rat).SetString(strconv.FormatFloat(r, 'g', -1, 64))
	return q, ok
}

// scaleRound returns round(d·(1−r)), or round(d·(1+r)) when up is set,
// rounding half away from zero, computed exactly.
func scaleRound(d int64, r *big.Rat, up bool) *big.Int {
	f := new(big.Rat).SetInt64(1)
	if up {
		f.Add(f, r)
	} else {
		f.Sub(f, r)
	}
	x := f.Mul(f, new(big.Rat).SetInt64(d))
	num, den := x.Num(), x.Denom() // den > 0
	neg := num.Sign() < 0
	abs := new(big.Int).Abs(num)
	q, rem := new(big.Int).QuoRem(abs, den, new(big.Int))
	if rem.Lsh(rem, 1).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	return q
}

// clamp returns v limited to [B, M], or [min(chain), max(chain)].
func (p Policy) clamp(v *big.Int) int64 {
	lo, hi := p.bounds()
	if v.Cmp(big.NewInt(lo)) < 0 {
		return lo
	}
	if v.Cmp(big.NewInt(hi)) > 0 {
		return hi
	}
	return v.Int64()
}
