package cli

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/entryview"
)

// printEvidence prints decoded evidence for people.
func printEvidence(w io.Writer, d decodedEvidence, indent string) {
	l := d.Lily
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s%-18s %s\n", indent, k, v)
		}
	}
	fmt.Fprintf(w, "%sLily evidence:\n", indent[:max(0, len(indent)-2)])
	if l == (lilyEvidenceJSON{}) {
		fmt.Fprintf(w, "%s(none)\n", indent)
	}
	kv("reason", l.Reason)
	if l.ErrorType != "" || l.ErrorMessage != "" {
		kv("error", strings.TrimPrefix(l.ErrorType+": "+l.ErrorMessage, ": "))
	}
	kv("source", l.Source)
	if l.SourcePartition != nil {
		kv("partition/offset", fmt.Sprintf("%d/%d", *l.SourcePartition, deref(l.SourceOffset)))
	}
	kv("source message id", l.SourceMessageID)
	if l.DeliveryCount+l.RetryCount+l.RedriveCount > 0 || l.RawRetryCount != "" {
		counts := fmt.Sprintf("delivery %d, retries %d, redrives %d", l.DeliveryCount, l.RetryCount, l.RedriveCount)
		if l.RawRetryCount != "" {
			counts += ", raw x-retry-count " + l.RawRetryCount
		}
		kv("counts", counts)
	}
	kv("first failure", fmtTime(l.FirstFailureAt))
	kv("last failure", fmtTime(l.LastFailureAt))
	kv("dead-lettered", fmtTime(l.DeadLetteredAt))
	if l.Consumer != "" || l.ConsumerVersion != "" || l.Host != "" {
		kv("consumer", strings.TrimSpace(l.Consumer+" "+l.ConsumerVersion+" on "+l.Host))
	}
	kv("traceparent", l.Traceparent)
	if l.ErrorStack != "" {
		fmt.Fprintf(w, "%sstack:\n%s\n", indent, indentLines(l.ErrorStack, indent+"  "))
	}
	printAttempts(w, d, indent)
	for _, p := range d.Problems {
		fmt.Fprintf(w, "%sproblem: %s\n", indent, p)
	}
	if len(d.Foreign) == 0 {
		return
	}
	fmt.Fprintf(w, "%sforeign evidence:\n", indent[:max(0, len(indent)-2)])
	for _, f := range d.Foreign {
		var parts []string
		add := func(k, v string) {
			if v != "" {
				parts = append(parts, k+" "+v)
			}
		}
		add("reason", f.Reason)
		add("at", f.Source)
		if f.Partition != nil {
			add("partition", fmt.Sprint(*f.Partition))
		}
		if f.Offset != nil {
			add("offset", fmt.Sprint(*f.Offset))
		}
		if f.Count > 0 {
			add("count", fmt.Sprint(f.Count))
		}
		add("time", fmtTime(f.Time))
		add("consumer", f.Consumer)
		if len(parts) > 0 {
			fmt.Fprintf(w, "%s%s %s: %s\n", indent, f.System, f.Origin, strings.Join(parts, ", "))
		} else {
			fmt.Fprintf(w, "%s%s %s\n", indent, f.System, f.Origin)
		}
		if f.ExceptionType != "" || f.Message != "" {
			fmt.Fprintf(w, "%s  error: %s\n", indent, strings.TrimPrefix(f.ExceptionType+": "+f.Message, ": "))
		}
		if f.Stack != "" {
			fmt.Fprintf(w, "%s  stack:\n%s\n", indent, indentLines(f.Stack, indent+"    "))
		}
	}
}

// printAttempts writes the attempt history as a table, one failed attempt a
// line, oldest first (line breaks and tabs in a message become
// spaces, oneLine); the attempts dropped to keep the header bounded are
// counted where they were, after the first.
func printAttempts(w io.Writer, d decodedEvidence, indent string) {
	if len(d.Attempts) == 0 {
		return
	}
	fmt.Fprintf(w, "%sattempts (%d):\n", indent, len(d.Attempts)+d.AttemptsDropped)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s  time\tretry\tdelivery\toutcome\terror\n", indent)
	for i, a := range d.Attempts {
		if i == 1 && d.AttemptsDropped > 0 {
			fmt.Fprintf(tw, "%s  …\t\t\t\t… %d more not kept (the header keeps the first and the last %d)\n", indent, d.AttemptsDropped, evidence.MaxRecentAttempts)
		}
		msg := strings.TrimPrefix(a.ErrorType+": "+strings.ReplaceAll(oneLine(a.ErrorMessage), "\t", " "), ": ")
		fmt.Fprintf(tw, "%s  %s\t%d\t%d\t%s\t%s\n", indent, a.At.UTC().Format(evidence.TimeLayout), a.RetryCount, a.DeliveryCount, orDash(a.Outcome), orDash(msg))
	}
	tw.Flush()
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(evidence.TimeLayout)
}

func indentLines(s, indent string) string {
	return indent + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent)
}

func sortedHeaderNames(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// printBody writes the body for people: pretty JSON, the text, or a hex dump.
func printBody(w io.Writer, v bodyView) {
	switch v.Format {
	case "erased", "empty":
		fmt.Fprintf(w, "body: (%s)\n", v.Format)
		return
	}
	fmt.Fprintf(w, "body (%s, %d bytes):\n", v.Format, v.Size)
	if v.Note != "" {
		fmt.Fprintf(w, "  (%s)\n", v.Note)
	}
	switch v.Format {
	case bodyJSON:
		var buf bytes.Buffer
		if err := json.Indent(&buf, v.Raw, "  ", "  "); err != nil {
			buf.Reset()
			buf.Write(v.Raw)
		}
		fmt.Fprintf(w, "  %s\n", buf.String())
	case bodyText:
		fmt.Fprintln(w, indentLines(v.Value.(string), "  "))
	default:
		fmt.Fprint(w, indentLines(hex.Dump(v.Raw), "  ")+"\n")
	}
}

// The views shared with the HTTP API (package entryview).
type (
	entryJSON        = entryview.Entry
	decodedEvidence  = entryview.Evidence
	lilyEvidenceJSON = entryview.LilyEvidence
	foreignJSON      = entryview.Foreign
	bodyView         = entryview.Body
)

// Body formats of --body.
const (
	bodyAuto = entryview.BodyAuto
	bodyText = entryview.BodyText
	bodyJSON = entryview.BodyJSON
	bodyHex  = entryview.BodyHex
)

var (
	decodeEvidence = entryview.DecodeEvidence
	entryView      = entryview.New
)

func validBodyFormat(f string) error {
	if entryview.ValidBodyFormat(f) {
		return nil
	}
	return usagef("--body %q: must be auto, text, json or hex", f)
}

// errNotJSONObject is returned by readHeaders for input that is not a JSON
// object.
var errNotJSONObject = errors.New("want one JSON object of headers, e.g. {\"x-death\": [{\"reason\": \"rejected\", \"queue\": \"orders\", \"count\": 3}]}")
