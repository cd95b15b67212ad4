package plan

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Never is the Need.Attempts of a message that fails every attempt (a
// permanent failure); it is written "never" in a distribution.
const Never = 0

// Limits on thresholds and distributions, so that sums cannot overflow.
const (
	// MaxThreshold is the largest threshold (and finite attempts needed).
	MaxThreshold = 1_000_000
	// MaxMessages is the most messages a distribution may describe.
	MaxMessages = 1_000_000_000_000
)

// Need is one class of a distribution of "attempts needed": Count messages
// that succeed at attempt Attempts (1 = the first processing), or never
// (Attempts == Never).
type Need struct {
	// Attempts is the attempt at which these messages succeed, >= 1, or
	// Never.
	Attempts int `json:"attempts_needed"`
	// Count is how many messages need that many attempts, >= 0.
	Count int64 `json:"count"`
}

// Distribution is a distribution of "attempts needed", one Need per
// distinct value, sorted by Attempts with Never last. Build it with
// ParseDistribution or ReadAttemptsLog.
type Distribution []Need

// ParseDistribution parses "needed:count,..." such as "1:9,3:5,5:4,never:2"
// (9 messages succeed at the first attempt, 5 at the third, 4 at the
// fifth, 2 never). Spaces around items are ignored, repeated values add up.
// Errors are *InputError for the field "distribution".
func ParseDistribution(s string) (Distribution, error) {
	counts := map[int]int64{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, ":")
		if !ok {
			return nil, inputErrorf("distribution", strconv.Quote(s),
				"item %q is not needed:count (e.g. 3:5 for five messages that succeed at the third attempt, never:2 for two that never do)", item)
		}
		need, err := parseNeed(strings.TrimSpace(k))
		if err != nil {
			return nil, inputErrorf("distribution", strconv.Quote(s), "item %q: %v", item, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 || n > MaxMessages {
			return nil, inputErrorf("distribution", strconv.Quote(s),
				"item %q: the count must be an integer in 0..%d", item, int64(MaxMessages))
		}
		counts[need] += n
		if counts[need] > MaxMessages {
			return nil, inputErrorf("distribution", strconv.Quote(s), "more than %d messages", int64(MaxMessages))
		}
	}
	return newDistribution("distribution", s, counts)
}

// ReadAttemptsLog reads one observed "attempts needed" per line: a
// positive integer, or "never" for a message that failed permanently.
// Blank lines and lines starting with # are skipped. Errors are
// *InputError for the field "attempts-log" and name the line.
func ReadAttemptsLog(r io.Reader) (Distribution, error) {
	counts := map[int]int64{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		need, err := parseNeed(t)
		if err != nil {
			return nil, inputErrorf("attempts-log", fmt.Sprintf("line %d %q", line, t), "%v", err)
		}
		counts[need]++
	}
	if err := sc.Err(); err != nil {
		return nil, inputErrorf("attempts-log", fmt.Sprintf("line %d", line+1), "%v", err)
	}
	return newDistribution("attempts-log", "", counts)
}

// parseNeed parses "never" or an attempt number in 1..MaxThreshold.
func parseNeed(s string) (int, error) {
	if strings.EqualFold(s, "never") {
		return Never, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxThreshold {
		return 0, fmt.Errorf("attempts needed must be an integer in 1..%d or \"never\", not %q", MaxThreshold, s)
	}
	return n, nil
}

// newDistribution builds a sorted Distribution and checks that it
// describes at least one message.
func newDistribution(field, value string, counts map[int]int64) (Distribution, error) {
	var d Distribution
	var total int64
	for a, n := range counts {
		if n > 0 {
			d = append(d, Need{Attempts: a, Count: n})
			total += n
		}
	}
	if len(d) == 0 {
		v := strconv.Quote(value)
		if field == "attempts-log" {
			v = "(no entries)"
		}
		return nil, inputErrorf(field, v, "is empty: give at least one message, e.g. 1:9,3:5,5:4,never:2")
	}
	if total > MaxMessages {
		return nil, inputErrorf(field, strconv.FormatInt(total, 10)+" messages", "at most %d are allowed", int64(MaxMessages))
	}
	slices.SortFunc(d, func(a, b Need) int { return needKey(a.Attempts) - needKey(b.Attempts) })
	return d, nil
}

// needKey orders Never after every finite value.
func needKey(a int) int {
	if a == Never {
		return MaxThreshold + 1
	}
	return a
}

// String formats d as ParseDistribution reads it.
func (d Distribution) String() string {
	parts := make([]string, len(d))
	for i, n := range d {
		k := "never"
		if n.Attempts != Never {
			k = strconv.Itoa(n.Attempts)
		}
		parts[i] = k + ":" + strconv.FormatInt(n.Count, 10)
	}
	return strings.Join(parts, ",")
}

// MaxNeeded returns the largest finite attempts needed, 0 when every
// message fails permanently.
func (d Distribution) MaxNeeded() int {
	m := 0
	for _, n := range d {
		m = max(m, n.Attempts)
	}
	return m
}

// ThresholdRow is the outcome of one threshold: a message is tried until
// it succeeds or until it has failed Threshold attempts, and then it is
// isolated (dead-lettered).
type ThresholdRow struct {
	// Threshold is the total number of attempts before isolation.
	Threshold int `json:"threshold"`
	// Processed counts messages that succeeded within the threshold.
	Processed int64 `json:"processed"`
	// WastedAttempts counts failed attempts: needed−1 for a processed
	// message, Threshold for an isolated one.
	WastedAttempts int64 `json:"wasted_attempts"`
	// WronglyIsolated counts isolated messages that would have succeeded
	// with more attempts.
	WronglyIsolated int64 `json:"wrongly_isolated"`
	// PermanentlyFailingIsolated counts isolated messages that never
	// succeed.
	PermanentlyFailingIsolated int64 `json:"permanently_failing_isolated"`
}

// ThresholdResult is the threshold sweep with its recommendation.
type ThresholdResult struct {
	// Messages is the number of messages in the distribution.
	Messages int64 `json:"messages"`
	// PermanentlyFailing counts the messages that never succeed.
	PermanentlyFailing int64 `json:"permanently_failing"`
	// Distribution is the input, sorted.
	Distribution Distribution `json:"distribution"`
	// MaxAttemptsNeeded is the largest finite attempts needed.
	MaxAttemptsNeeded int `json:"max_attempts_needed"`
	// Rows holds one row per threshold, in the order given.
	Rows []ThresholdRow `json:"thresholds"`
	// RecommendedThreshold is the smallest threshold that isolates no
	// message that would have succeeded: the smallest of the given
	// thresholds with WronglyIsolated == 0 or, when none qualifies,
	// MinimumSafeThreshold.
	RecommendedThreshold int `json:"recommended_threshold"`
	// RecommendedListed tells whether RecommendedThreshold is one of the
	// given thresholds.
	RecommendedListed bool `json:"recommended_listed"`
	// MinimumSafeThreshold is max(1, MaxAttemptsNeeded): the smallest
	// threshold of all that isolates nothing wrongly.
	MinimumSafeThreshold int `json:"minimum_safe_threshold"`
	// RecommendedRetryAttempts is RecommendedThreshold−1, the Lily
	// retry_attempts setting that makes that many total attempts.
	RecommendedRetryAttempts int `json:"recommended_retry_attempts"`
}

// DefaultThresholds returns the thresholds swept when none are given:
// every value from 1 to one above the largest finite attempts needed.
func DefaultThresholds(d Distribution) []int {
	top := d.MaxNeeded() + 1
	out := make([]int, top)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// Thresholds sweeps thresholds over the distribution d (seed 003, "choosing
// the threshold"): for each threshold t and each message needing a
// attempts, the message is processed after a−1 wasted attempts when
// a <= t, and otherwise isolated after t wasted attempts — wrongly if it
// would have succeeded later, rightly if it never succeeds. The seed's
// 20 messages "1:9,3:5,5:4,never:2" at thresholds 1, 2, 3, 5, 8 give
// processed 9, 9, 14, 18, 18; wasted 11, 22, 28, 36, 42; wrongly isolated
// 9, 9, 4, 0, 0; permanently failing isolated 2 each; recommended 5.
// Errors are *InputError for the field "thresholds".
func Thresholds(d Distribution, thresholds []int) (ThresholdResult, error) {
	if len(d) == 0 {
		return ThresholdResult{}, inputErrorf("distribution", `""`, "is empty: give at least one message, e.g. 1:9,3:5,5:4,never:2")
	}
	if len(thresholds) == 0 {
		return ThresholdResult{}, inputErrorf("thresholds", `""`, "give at least one threshold, e.g. 1,2,3,5,8")
	}
	for _, t := range thresholds {
		if t < 1 || t > MaxThreshold {
			return ThresholdResult{}, inputErrorf("thresholds", strconv.Itoa(t), "a threshold must be an integer in 1..%d (total attempts)", MaxThreshold)
		}
	}
	r := ThresholdResult{Distribution: d, MaxAttemptsNeeded: d.MaxNeeded(), Rows: []ThresholdRow{}}
	for _, n := range d {
		r.Messages += n.Count
		if n.Attempts == Never {
			r.PermanentlyFailing += n.Count
		}
	}
	r.MinimumSafeThreshold = max(1, r.MaxAttemptsNeeded)
	for _, t := range thresholds {
		row := sweep(d, t)
		r.Rows = append(r.Rows, row)
		if row.WronglyIsolated == 0 && (!r.RecommendedListed || t < r.RecommendedThreshold) {
			r.RecommendedThreshold, r.RecommendedListed = t, true
		}
	}
	if !r.RecommendedListed {
		r.RecommendedThreshold = r.MinimumSafeThreshold
	}
	r.RecommendedRetryAttempts = r.RecommendedThreshold - 1
	return r, nil
}

// sweep returns the outcome of threshold t.
func sweep(d Distribution, t int) ThresholdRow {
	row := ThresholdRow{Threshold: t}
	for _, n := range d {
		switch {
		case n.Attempts != Never && n.Attempts <= t:
			row.Processed += n.Count
			row.WastedAttempts += n.Count * int64(n.Attempts-1)
		case n.Attempts == Never:
			row.PermanentlyFailingIsolated += n.Count
			row.WastedAttempts += n.Count * int64(t)
		default:
			row.WronglyIsolated += n.Count
			row.WastedAttempts += n.Count * int64(t)
		}
	}
	return row
}

// Chart returns the sweep: wasted attempts, processed and wrongly isolated
// messages (y) against the threshold (x), with the recommended threshold
// marked on the wasted-attempts line when it is one of the rows.
func (r ThresholdResult) Chart() Chart {
	rows := slices.Clone(r.Rows)
	slices.SortStableFunc(rows, func(a, b ThresholdRow) int { return a.Threshold - b.Threshold })
	rows = slices.CompactFunc(rows, func(a, b ThresholdRow) bool { return a.Threshold == b.Threshold })
	var wasted, processed, wrong []Point
	for _, row := range rows {
		x := float64(row.Threshold)
		wasted = append(wasted, Point{X: x, Y: float64(row.WastedAttempts)})
		processed = append(processed, Point{X: x, Y: float64(row.Processed)})
		wrong = append(wrong, Point{X: x, Y: float64(row.WronglyIsolated)})
	}
	dist := r.Distribution.String()
	if len(dist) > 60 {
		cut := strings.LastIndexByte(dist[:57], ',')
		if cut < 0 {
			cut = 57
		}
		dist = dist[:cut] + ",..."
	}
	c := Chart{
		Title:    "Choosing a threshold",
		Subtitle: fmt.Sprintf("%d messages, %d of them never succeed; distribution %s", r.Messages, r.PermanentlyFailing, dist),
		MarkName: "recommended",
		XLabel:   "threshold (total attempts before isolation)",
		YLabel:   "messages / attempts",
		Series: []Series{
			{Name: "wasted attempts", Points: wasted},
			{Name: "processed", Points: processed},
			{Name: "wrongly isolated", Points: wrong},
		},
	}
	for _, row := range rows {
		if row.Threshold == r.RecommendedThreshold {
			c.Marks = append(c.Marks, Mark{X: float64(row.Threshold), Y: float64(row.WastedAttempts),
				Label: fmt.Sprintf("recommended: %d (retry_attempts %d)", row.Threshold, row.Threshold-1)})
		}
	}
	return c
}
