package plan

import (
	"fmt"
	"math"
	"time"
)

// PoisonParams describes crash-type poison messages: messages that fail
// every attempt, each attempt holding a handler until it crashes.
type PoisonParams struct {
	// Rate is the arrival rate of all messages per second; >= 0.
	Rate float64
	// PoisonFraction is the share of messages that are poison; 0..1.
	PoisonFraction float64
	// CrashAfter is how long one attempt of a poison message holds a
	// handler before it fails or crashes; >= 0.
	CrashAfter time.Duration
	// Redelivery is how long until a failed poison message is delivered
	// again (the lease or visibility timeout); > 0.
	Redelivery time.Duration
	// Attempts is the limit, in total attempts, after which a poison
	// message is dead-lettered; 0 means "not given" and leaves the
	// with-a-limit fields out.
	Attempts int
	// HandlerTime is how long a healthy message holds a handler; 0 means
	// "not given" and leaves HealthyConcurrency out.
	HandlerTime time.Duration
}

// PoisonResult is the cost of poison messages with and without a limit on
// attempts (seed 000, "the cost of no limit").
type PoisonResult struct {
	// RatePerS is the arrival rate of all messages.
	RatePerS float64 `json:"rate_per_s"`
	// PoisonFraction is the share of poison messages.
	PoisonFraction float64 `json:"poison_fraction"`
	// CrashAfterS is how long one poison attempt holds a handler, in
	// seconds.
	CrashAfterS float64 `json:"crash_after_s"`
	// RedeliveryS is the redelivery interval in seconds.
	RedeliveryS float64 `json:"redelivery_s"`
	// PoisonPerDay is N = rate · fraction · 86,400 new poison messages a
	// day.
	PoisonPerDay float64 `json:"poison_per_day"`
	// HandlersBurntAfterOneDay is N·C/R: without a limit, after one day the
	// N poison messages are each redelivered every R seconds (the lease or
	// visibility timeout runs from the delivery, so R is the whole cycle)
	// and hold a handler C seconds each time, so by Little's law they keep
	// N·C/R handlers busy at any moment — a number that grows by as much
	// every day.
	HandlersBurntAfterOneDay float64 `json:"handlers_burnt_after_one_day"`
	// CrashesPerSAfterOneDay is N/R: without a limit, the deliveries of
	// poison messages per second after one day, each of which may kill a
	// process.
	CrashesPerSAfterOneDay float64 `json:"crashes_per_s_after_one_day"`
	// Attempts is the limit in total attempts; omitted when not given.
	Attempts int `json:"attempts,omitempty"`
	// HandlerSecondsPerPoison is K·C, the handler time one poison message
	// costs before it is dead-lettered at the limit K; omitted without a
	// limit.
	HandlerSecondsPerPoison *float64 `json:"handler_seconds_per_poison,omitempty"`
	// LimitedConcurrentHandlers is (N/86,400)·K·C, the handlers poison
	// keeps busy with the limit: constant instead of growing; omitted
	// without a limit.
	LimitedConcurrentHandlers *float64 `json:"limited_concurrent_handlers,omitempty"`
	// HandlerTimeS is the healthy handler time in seconds; omitted when not
	// given.
	HandlerTimeS float64 `json:"handler_time_s,omitempty"`
	// HealthyConcurrency is rate · handler time, the handlers the healthy
	// load needs by Little's law (L = λ·W); omitted without a handler time.
	HealthyConcurrency *float64 `json:"healthy_concurrency,omitempty"`
}

// Poison returns the cost of poison messages. The worked example of seed
// 000: 2000 messages/s, one in 100,000 poison (1e-5), crashing its handler
// after 2 s and redelivered every 60 s: 2000·1e-5·86,400 = 1,728 poison
// messages a day, which after one day without a limit keep
// 1728·2/60 = 57.6 handlers busy; with a limit of 5 attempts each costs
// 5·2 = 10 handler-seconds; and the healthy load, 50 ms per message, needs
// 2000·0.05 = 100 concurrent handlers.
func Poison(p PoisonParams) (PoisonResult, error) {
	if err := checkRate("rate", p.Rate); err != nil {
		return PoisonResult{}, err
	}
	if err := checkProbability("poison-fraction", p.PoisonFraction); err != nil {
		return PoisonResult{}, err
	}
	if err := checkDuration("crash-after", p.CrashAfter, false); err != nil {
		return PoisonResult{}, err
	}
	if err := checkDuration("redelivery", p.Redelivery, true); err != nil {
		return PoisonResult{}, err
	}
	if p.Attempts != 0 {
		if err := checkAttempts(p.Attempts); err != nil {
			return PoisonResult{}, err
		}
	}
	if err := checkDuration("handler-time", p.HandlerTime, false); err != nil {
		return PoisonResult{}, err
	}
	rate, c, rd := exact(p.Rate), seconds(p.CrashAfter), seconds(p.Redelivery)
	perS := mul(rate, exact(p.PoisonFraction))
	n := mul(perS, integer(secondsPerDay))
	r := PoisonResult{
		RatePerS:                 p.Rate,
		PoisonFraction:           p.PoisonFraction,
		CrashAfterS:              float(c),
		RedeliveryS:              float(rd),
		PoisonPerDay:             float(n),
		HandlersBurntAfterOneDay: float(quo(mul(n, c), rd)),
		CrashesPerSAfterOneDay:   float(quo(n, rd)),
		Attempts:                 p.Attempts,
	}
	if p.Attempts > 0 {
		per := mul(integer(int64(p.Attempts)), c)
		hs, lc := float(per), float(mul(perS, per))
		r.HandlerSecondsPerPoison, r.LimitedConcurrentHandlers = &hs, &lc
	}
	if p.HandlerTime > 0 {
		w := seconds(p.HandlerTime)
		hc := float(mul(rate, w))
		r.HandlerTimeS, r.HealthyConcurrency = float(w), &hc
	}
	return r, nil
}

// Chart returns the handlers kept busy by poison (y) against the days
// since it started arriving (x): growing without a limit, flat with the
// result's limit, next to the healthy load's concurrency when known. The
// horizon is a week, or until the unbounded poison passes the healthy load
// (at most a year).
func (r PoisonResult) Chart() Chart {
	days := 7
	if r.HealthyConcurrency != nil && r.HandlersBurntAfterOneDay > 0 {
		cross := *r.HealthyConcurrency / r.HandlersBurntAfterOneDay
		days = max(days, int(math.Min(365, math.Ceil(cross)+1)))
	}
	grow := exact(r.HandlersBurntAfterOneDay)
	var unbounded, limited, healthy []Point
	for d := 0; d <= days; d++ {
		x := float64(d)
		unbounded = append(unbounded, Point{X: x, Y: float(mul(grow, integer(int64(d))))})
		if r.LimitedConcurrentHandlers != nil {
			limited = append(limited, Point{X: x, Y: *r.LimitedConcurrentHandlers})
		}
		if r.HealthyConcurrency != nil {
			healthy = append(healthy, Point{X: x, Y: *r.HealthyConcurrency})
		}
	}
	c := Chart{
		Title: "Handlers kept busy by poison messages",
		Subtitle: fmt.Sprintf("%s poison messages a day, %s per attempt, redelivered every %s",
			fmtNumber(r.PoisonPerDay), fmtSeconds(r.CrashAfterS), fmtSeconds(r.RedeliveryS)),
		MarkName: "one day, no limit",
		XLabel:   "days since the poison began",
		YLabel:   "concurrent handlers",
		Series:   []Series{{Name: "poison, no limit", Points: unbounded}},
		Marks: []Mark{{X: 1, Y: r.HandlersBurntAfterOneDay,
			Label: fmt.Sprintf("after one day: %s handlers", fmtNumber(r.HandlersBurntAfterOneDay))}},
	}
	if limited != nil {
		c.Series = append(c.Series, Series{Name: fmt.Sprintf("poison, limit %d attempts", r.Attempts), Points: limited})
	}
	if healthy != nil {
		c.Series = append(c.Series, Series{Name: "healthy load", Points: healthy})
	}
	return c
}
