package plan

import (
	"fmt"
	"math"
	"math/big"
	"time"
)

// OutageParams describes a dependency outage and the retry schedule that
// meets it.
type OutageParams struct {
	// Rate is λ, the arrival rate of messages per second; >= 0.
	Rate float64
	// Outage is O, how long every attempt fails; >= 0.
	Outage time.Duration
	// Schedule is the retry schedule; its span is S.
	Schedule Schedule
}

// OutageResult is the cost of an outage of O seconds at λ messages per
// second against a retry span of S seconds. Arrivals are uniform, and a
// message is dead-lettered when its first attempt and its whole retry span
// fall inside the outage.
type OutageResult struct {
	// RatePerS is λ.
	RatePerS float64 `json:"rate_per_s"`
	// OutageS is O in seconds.
	OutageS float64 `json:"outage_s"`
	// Attempts is the total number of attempts, first processing included.
	Attempts int `json:"attempts"`
	// DelaysS are the delays between attempts, in seconds.
	DelaysS []float64 `json:"delays_s"`
	// RetrySpanS is S = the sum of the delays; with a fixed interval i and
	// k attempts, (k−1)·i.
	RetrySpanS float64 `json:"retry_span_s"`
	// DeadLettered is λ·max(0, O − S): every message that arrives in the
	// first O − S seconds of the outage fails all its attempts.
	DeadLettered float64 `json:"dead_lettered"`
	// CirculatingAtEnd is λ·min(O, S): the messages still waiting for a
	// retry when the outage ends (those that arrived in its last S seconds).
	CirculatingAtEnd float64 `json:"circulating_at_end"`
	// ExtraReceivesPerS is, with a fixed interval i only, the extra receive
	// load the circulating messages put on the broker: λ·min(O, S)/i per
	// second. It is nil (omitted) for other schedules.
	ExtraReceivesPerS *float64 `json:"extra_receives_per_s,omitempty"`
}

// Outage returns the cost of the outage described by p (seed 000, "the
// limit against correlated failures"): with λ = 2000/s and O = 600 s, five
// attempts a fixed 60 s apart span S = 240 s and dead-letter
// 2000·(600−240) = 720,000 healthy messages; delays of 30, 60, 120 and
// 240 s span 450 s and dead-letter 300,000; twenty attempts 60 s apart span
// 1140 s, dead-letter none, but leave 2000·600 = 1,200,000 messages
// circulating, 1,200,000/60 = 20,000 extra receives per second.
func Outage(p OutageParams) (OutageResult, error) {
	if err := checkRate("rate", p.Rate); err != nil {
		return OutageResult{}, err
	}
	if err := checkDuration("outage", p.Outage, false); err != nil {
		return OutageResult{}, err
	}
	if p.Schedule.Attempts != len(p.Schedule.Delays)+1 {
		return OutageResult{}, inputErrorf("attempts", fmt.Sprint(p.Schedule.Attempts),
			"must be the number of delays plus one (%d)", len(p.Schedule.Delays)+1)
	}
	lambda, o, s := exact(p.Rate), seconds(p.Outage), p.Schedule.span()
	r := OutageResult{
		RatePerS:         p.Rate,
		OutageS:          float(o),
		Attempts:         p.Schedule.Attempts,
		DelaysS:          p.Schedule.delaysSeconds(),
		RetrySpanS:       float(s),
		DeadLettered:     float(deadLettered(lambda, o, s)),
		CirculatingAtEnd: float(mul(lambda, minRat(o, s))),
	}
	if p.Schedule.Kind == KindInterval && p.Schedule.Interval > 0 {
		x := float(quo(mul(lambda, minRat(o, s)), seconds(p.Schedule.Interval)))
		r.ExtraReceivesPerS = &x
	}
	return r, nil
}

// deadLettered returns λ·max(0, O − S).
func deadLettered(lambda, o, s *big.Rat) *big.Rat {
	d := new(big.Rat).Sub(o, s)
	if d.Sign() < 0 {
		d.SetInt64(0)
	}
	return d.Mul(d, lambda)
}

// Chart returns the dead-lettered messages (y) against the retry span (x)
// for the result's rate and outage, like the figure of seed 000: a sweep of
// spans from 0 to beyond the outage, the knee at S = O, and the result's own
// span marked.
func (r OutageResult) Chart() Chart {
	lambda, o := exact(r.RatePerS), exact(r.OutageS)
	hi := math.Max(r.OutageS, r.RetrySpanS) * 1.25
	if hi == 0 {
		hi = 60
	}
	step := niceStep(hi / 12)
	var pts []Point
	addPt := func(x float64) {
		pts = append(pts, Point{X: x, Y: float(deadLettered(lambda, o, exact(x)))})
	}
	kneeDone := false
	for i := 0; ; i++ {
		x := roundTo(float64(i)*step, step)
		if !kneeDone && r.OutageS < x {
			addPt(r.OutageS)
		}
		kneeDone = kneeDone || r.OutageS <= x
		addPt(x)
		if x >= hi {
			break
		}
	}
	return Chart{
		Title: "Healthy messages dead-lettered during an outage",
		Subtitle: fmt.Sprintf("%s messages/s, outage %s: a message whose whole retry span falls inside the outage is dead-lettered",
			fmtNumber(r.RatePerS), fmtSeconds(r.OutageS)),
		MarkName: "your schedule",
		XLabel:   "retry span: time spanned by all retry attempts (s)",
		YLabel:   "messages dead-lettered",
		Series:   []Series{{Name: "dead-lettered", Points: pts}},
		Marks: []Mark{{X: r.RetrySpanS, Y: r.DeadLettered,
			Label: fmt.Sprintf("span %s s: %s dead-lettered", fmtNumber(r.RetrySpanS), fmtNumber(r.DeadLettered))}},
	}
}
