package plan

import (
	"math"
	"strconv"
	"strings"
)

// FormatNumber formats a planner result for people: whole numbers with
// thousands separators (720000 → "720,000"), other numbers of at least 1
// with up to two decimals (31.3 → "31.3", 540.864 → "540.86"), smaller
// ones with four significant digits (0.01728 → "0.01728").
func FormatNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return group(strconv.FormatFloat(v, 'f', 0, 64))
	case math.Abs(v) >= 1e15:
		return strconv.FormatFloat(v, 'g', 4, 64)
	case math.Abs(v) >= 1:
		s := strconv.FormatFloat(v, 'f', 2, 64)
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		i, frac, _ := strings.Cut(s, ".")
		if frac != "" {
			return group(i) + "." + frac
		}
		return group(i)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// group inserts thousands separators into a decimal integer.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// FormatSeconds formats a number of seconds as "240 s", adding minutes or
// hours from a minute on: "1,140 s (19 min)", "540.86 s (9.01 min)",
// "7,200 s (2 h)".
func FormatSeconds(s float64) string {
	out := FormatNumber(s) + " s"
	switch {
	case s >= 3600:
		out += " (" + FormatNumber(s/3600) + " h)"
	case s >= 60:
		out += " (" + FormatNumber(s/60) + " min)"
	}
	return out
}

// fmtSeconds is FormatSeconds.
func fmtSeconds(s float64) string { return FormatSeconds(s) }

// fmtNumber is FormatNumber.
func fmtNumber(v float64) string { return FormatNumber(v) }
