package lint

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Severity ranks a finding. Errors make 'lily lint' exit 1; warnings do so
// with --strict; infos never do.
type Severity string

// Severities, most severe first.
const (
	// Error: the configuration or the broker loses messages (silently, or
	// by discarding them before anyone can act), or contradicts a
	// requirement the configuration itself states.
	Error Severity = "error"
	// Warning: messages are dead-lettered or delayed needlessly, or a
	// change away from trouble (a limit close by, a missing owner).
	Warning Severity = "warning"
	// Info: worth knowing, costs nothing today.
	Info Severity = "info"
)

// rank orders severities for sorting: errors first.
func (s Severity) rank() int {
	switch s {
	case Error:
		return 0
	case Warning:
		return 1
	}
	return 2
}

// Finding is one problem found by Static, or by the live checks of package
// brokers/livelint.
type Finding struct {
	// Severity is "error", "warning" or "info".
	Severity Severity `json:"severity"`
	// Queue is the Lily queue ([[queue]] name) the finding is about; empty
	// for findings about the whole configuration or the broker.
	Queue string `json:"queue"`
	// Code is a stable kebab-case identifier such as "no-retries"; the
	// Code* constants list them.
	Code string `json:"code"`
	// What states what is wrong, naming the setting or broker object and
	// its value.
	What string `json:"what"`
	// Why explains how it loses or delays messages.
	Why string `json:"why"`
	// Fix says what to change.
	Fix string `json:"fix"`
}

// Report is the result of a lint run: the findings, sorted, and how many
// of each severity there are. It is the JSON output of 'lily lint --json'.
type Report struct {
	// Findings are grouped by queue, in the order the queues first appear
	// (findings about no queue last), errors first within a queue.
	Findings []Finding `json:"findings"`
	// Errors is the number of findings of severity error.
	Errors int `json:"errors"`
	// Warnings is the number of findings of severity warning.
	Warnings int `json:"warnings"`
	// Infos is the number of findings of severity info.
	Infos int `json:"infos"`
}

// NewReport sorts findings (see Report.Findings) and counts them. It does
// not modify the slice it is given.
func NewReport(findings []Finding) Report {
	order := map[string]int{}
	for _, f := range findings {
		if _, ok := order[f.Queue]; !ok && f.Queue != "" {
			order[f.Queue] = len(order)
		}
	}
	pos := func(q string) int {
		if q == "" {
			return len(order)
		}
		return order[q]
	}
	fs := slices.Clone(findings)
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if d := pos(a.Queue) - pos(b.Queue); d != 0 {
			return d
		}
		if d := a.Severity.rank() - b.Severity.rank(); d != 0 {
			return d
		}
		return strings.Compare(a.Code, b.Code)
	})
	r := Report{Findings: fs}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	for _, f := range fs {
		switch f.Severity {
		case Error:
			r.Errors++
		case Warning:
			r.Warnings++
		default:
			r.Infos++
		}
	}
	return r
}

// Failed reports whether 'lily lint' exits 1: on any error, and with
// strict on any warning too.
func (r Report) Failed(strict bool) bool {
	return r.Errors > 0 || (strict && r.Warnings > 0)
}

// Has reports whether the report holds a finding with the given code about
// the given queue ("" matches findings about no queue).
func (r Report) Has(code, queue string) bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Code == code && f.Queue == queue })
}

// WriteText writes the report for people: one block per queue, each
// finding as "severity code: what" followed by its why and fix, then a
// summary line.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	group := "\x00"
	for _, f := range r.Findings {
		if f.Queue != group {
			if group != "\x00" {
				b.WriteString("\n")
			}
			group = f.Queue
			if f.Queue == "" {
				b.WriteString("(configuration and broker)\n")
			} else {
				fmt.Fprintf(&b, "queue %s\n", f.Queue)
			}
		}
		fmt.Fprintf(&b, "  %-7s %s: %s\n", f.Severity, f.Code, f.What)
		fmt.Fprintf(&b, "          why: %s\n", f.Why)
		fmt.Fprintf(&b, "          fix: %s\n", f.Fix)
	}
	if len(r.Findings) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%s, %s, %s\n", plural(r.Errors, "error"), plural(r.Warnings, "warning"), plural(r.Infos, "info"))
	_, err := io.WriteString(w, b.String())
	return err
}

// plural formats "1 error", "2 errors", "0 infos".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
