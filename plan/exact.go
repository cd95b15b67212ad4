package plan

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"
)

// InputError is a bad input to a planner function: which input, the value
// it had and the rule it broke. Field is spelt like the flag of 'lily plan'
// that sets it, without the dashes, e.g. "rate" or "failure-prob".
type InputError struct {
	// Field names the input, e.g. "rate".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule states what is allowed, e.g. "must be a finite number >= 0".
	Rule string
}

// Error returns "<field> <value>: <rule>".
func (e *InputError) Error() string { return e.Field + " " + e.Value + ": " + e.Rule }

// inputErrorf builds an InputError.
func inputErrorf(field, value, format string, args ...any) *InputError {
	return &InputError{Field: field, Value: value, Rule: fmt.Sprintf(format, args...)}
}

// secondsPerDay is the length of the planner's day.
const secondsPerDay = 86400

// exact returns f as the exact rational of its shortest decimal
// representation ("0.01" is 1/100, not the binary float nearest to it).
// f must be finite.
func exact(f float64) *big.Rat {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if !ok { // unreachable for finite f
		return new(big.Rat).SetFloat64(f)
	}
	return r
}

// seconds returns d in seconds, exactly.
func seconds(d time.Duration) *big.Rat {
	return big.NewRat(int64(d), int64(time.Second))
}

// integer returns n as a rational.
func integer(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// mul returns the product of its arguments as a new rational.
func mul(xs ...*big.Rat) *big.Rat {
	p := big.NewRat(1, 1)
	for _, x := range xs {
		p.Mul(p, x)
	}
	return p
}

// add returns the sum of its arguments as a new rational.
func add(xs ...*big.Rat) *big.Rat {
	s := new(big.Rat)
	for _, x := range xs {
		s.Add(s, x)
	}
	return s
}

// quo returns x/y as a new rational; y must not be zero.
func quo(x, y *big.Rat) *big.Rat { return new(big.Rat).Quo(x, y) }

// minRat returns the smaller of x and y.
func minRat(x, y *big.Rat) *big.Rat {
	if x.Cmp(y) <= 0 {
		return x
	}
	return y
}

// float returns the float64 nearest to r.
func float(r *big.Rat) float64 {
	f, _ := r.Float64()
	return f
}

// checkRate reports an InputError for field unless v is a finite number >= 0.
func checkRate(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return inputErrorf(field, fmtFloat(v), "must be a finite number >= 0")
	}
	return nil
}

// checkProbability reports an InputError for field unless v is in 0..1.
func checkProbability(field string, v float64) error {
	if math.IsNaN(v) || v < 0 || v > 1 {
		return inputErrorf(field, fmtFloat(v), "must be a probability in 0..1 (e.g. 0.01 for 1%%)")
	}
	return nil
}

// checkDuration reports an InputError for field unless d >= 0, or d > 0
// when positive is set.
func checkDuration(field string, d time.Duration, positive bool) error {
	switch {
	case d < 0:
		return inputErrorf(field, d.String(), "must not be negative")
	case positive && d == 0:
		return inputErrorf(field, d.String(), "must be > 0 (Go duration syntax, e.g. 60s, 50ms, 10m)")
	}
	return nil
}

// fmtFloat formats v in its shortest form.
func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
