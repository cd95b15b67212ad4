package plan

import (
	"fmt"
	"math/big"
)

// IndependentParams describes transient failures that strike every attempt
// independently.
type IndependentParams struct {
	// Rate is the arrival rate of messages per second; >= 0.
	Rate float64
	// FailureProb is p, the probability that one attempt fails; 0..1.
	FailureProb float64
	// Attempts is k, the total number of attempts; >= 1.
	Attempts int
}

// IndependentResult is the number of healthy messages dead-lettered when
// each attempt fails independently with probability p: a message is
// dead-lettered only if all k attempts fail, with probability p^k.
type IndependentResult struct {
	// RatePerS is the arrival rate.
	RatePerS float64 `json:"rate_per_s"`
	// FailureProb is p.
	FailureProb float64 `json:"failure_prob"`
	// Attempts is k.
	Attempts int `json:"attempts"`
	// DailyVolume is rate · 86,400.
	DailyVolume float64 `json:"daily_volume"`
	// DeadLetterProbability is p^k, the chance that one healthy message is
	// dead-lettered.
	DeadLetterProbability float64 `json:"dead_letter_probability"`
	// DeadLetteredPerDay is DailyVolume · p^k.
	DeadLetteredPerDay float64 `json:"dead_lettered_per_day"`
	// DaysBetweenDeadLetters is 1/DeadLetteredPerDay, the mean time between
	// two healthy messages dead-lettered; nil (omitted) when none are.
	DaysBetweenDeadLetters *float64 `json:"days_between_dead_letters,omitempty"`
}

// Independent returns the healthy messages dead-lettered per day by
// independent failures (seed 000, "the limit against independent
// failures"): at 2000/s the daily volume is 172,800,000; with p = 0.01,
// k = 3 attempts dead-letter 172.8 a day and k = 5 attempts 0.01728, one
// every 58 days or so.
func Independent(p IndependentParams) (IndependentResult, error) {
	if err := checkRate("rate", p.Rate); err != nil {
		return IndependentResult{}, err
	}
	if err := checkProbability("failure-prob", p.FailureProb); err != nil {
		return IndependentResult{}, err
	}
	if err := checkAttempts(p.Attempts); err != nil {
		return IndependentResult{}, err
	}
	vol := mul(exact(p.Rate), integer(secondsPerDay))
	pk := power(exact(p.FailureProb), p.Attempts)
	perDay := mul(vol, pk)
	r := IndependentResult{
		RatePerS:              p.Rate,
		FailureProb:           p.FailureProb,
		Attempts:              p.Attempts,
		DailyVolume:           float(vol),
		DeadLetterProbability: float(pk),
		DeadLetteredPerDay:    float(perDay),
	}
	if perDay.Sign() > 0 {
		d := float(quo(integer(1), perDay))
		r.DaysBetweenDeadLetters = &d
	}
	return r, nil
}

// power returns x^n exactly, n >= 0.
func power(x *big.Rat, n int) *big.Rat {
	num := new(big.Int).Exp(x.Num(), big.NewInt(int64(n)), nil)
	den := new(big.Int).Exp(x.Denom(), big.NewInt(int64(n)), nil)
	return new(big.Rat).SetFrac(num, den)
}

// Chart returns the healthy messages dead-lettered per day (y, logarithmic)
// against the total attempts k (x), from 1 to a few beyond the result's k
// (at most 60 points), which is marked.
func (r IndependentResult) Chart() Chart {
	top := max(r.Attempts+3, 8)
	vol, p := mul(exact(r.RatePerS), integer(secondsPerDay)), exact(r.FailureProb)
	pts := make([]Point, 0, 60)
	for k := max(1, top-59); k <= top; k++ {
		pts = append(pts, Point{X: float64(k), Y: float(mul(vol, power(p, k)))})
	}
	return Chart{
		Title: "Healthy messages dead-lettered by independent failures",
		Subtitle: fmt.Sprintf("%s messages/s (%s a day), each attempt failing independently with p = %s",
			fmtNumber(r.RatePerS), fmtNumber(r.DailyVolume), fmtFloat(r.FailureProb)),
		MarkName: "your attempts",
		XLabel:   "total attempts k",
		YLabel:   "dead-lettered per day (log scale)",
		LogY:     true,
		Series:   []Series{{Name: "daily volume · p^k", Points: pts}},
		Marks: []Mark{{X: float64(r.Attempts), Y: r.DeadLetteredPerDay,
			Label: fmt.Sprintf("k = %d: %s a day", r.Attempts, fmtNumber(r.DeadLetteredPerDay))}},
	}
}
