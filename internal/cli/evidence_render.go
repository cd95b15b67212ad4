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
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// lilyEvidenceJSON is Lily's evidence (evidence.Record) as JSON.
type lilyEvidenceJSON struct {
	Reason          string     `json:"reason,omitempty"`
	ErrorType       string     `json:"error_type,omitempty"`
	ErrorMessage    string     `json:"error_message,omitempty"`
	ErrorStack      string     `json:"error_stack,omitempty"`
	Source          string     `json:"source,omitempty"`
	SourcePartition *int32     `json:"source_partition,omitempty"`
	SourceOffset    *int64     `json:"source_offset,omitempty"`
	SourceMessageID string     `json:"source_message_id,omitempty"`
	DeliveryCount   int        `json:"delivery_count,omitempty"`
	RetryCount      int        `json:"retry_count,omitempty"`
	RawRetryCount   string     `json:"raw_retry_count,omitempty"`
	RedriveCount    int        `json:"redrive_count,omitempty"`
	FirstFailureAt  *time.Time `json:"first_failure_at,omitempty"`
	LastFailureAt   *time.Time `json:"last_failure_at,omitempty"`
	DeadLetteredAt  *time.Time `json:"dead_lettered_at,omitempty"`
	Consumer        string     `json:"consumer,omitempty"`
	ConsumerVersion string     `json:"consumer_version,omitempty"`
	Host            string     `json:"host,omitempty"`
	Traceparent     string     `json:"traceparent,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func lilyJSON(r evidence.Record) lilyEvidenceJSON {
	j := lilyEvidenceJSON{Reason: string(r.Reason), ErrorType: r.ErrorType, ErrorMessage: r.ErrorMessage, ErrorStack: r.ErrorStack,
		Source: r.Source, SourceMessageID: r.SourceMessageID, DeliveryCount: r.DeliveryCount, RetryCount: r.RetryCount,
		RawRetryCount: r.RawRetryCount, RedriveCount: r.RedriveCount, FirstFailureAt: timePtr(r.FirstFailureAt),
		LastFailureAt: timePtr(r.LastFailureAt), DeadLetteredAt: timePtr(r.DeadLetteredAt), Consumer: r.Consumer,
		ConsumerVersion: r.ConsumerVersion, Host: r.Host, Traceparent: r.Traceparent}
	if r.HasPartition {
		p := r.SourcePartition
		j.SourcePartition = &p
	}
	if r.HasOffset {
		o := r.SourceOffset
		j.SourceOffset = &o
	}
	return j
}

// foreignJSON is decoded foreign evidence (evidence.ForeignEvidence) as JSON.
type foreignJSON struct {
	System        string            `json:"system"`
	Origin        string            `json:"origin"`
	Reason        string            `json:"reason,omitempty"`
	Source        string            `json:"source,omitempty"`
	Partition     *int32            `json:"partition,omitempty"`
	Offset        *int64            `json:"offset,omitempty"`
	ExceptionType string            `json:"exception_type,omitempty"`
	Message       string            `json:"message,omitempty"`
	Stack         string            `json:"stack,omitempty"`
	Consumer      string            `json:"consumer,omitempty"`
	Time          *time.Time        `json:"time,omitempty"`
	Count         int               `json:"count,omitempty"`
	Raw           map[string]string `json:"raw"`
}

func foreignList(fs []evidence.ForeignEvidence) []foreignJSON {
	out := make([]foreignJSON, len(fs))
	for i, f := range fs {
		j := foreignJSON{System: f.System, Origin: f.Origin, Reason: f.Reason, Source: f.Source, ExceptionType: f.ExceptionType,
			Message: f.Message, Stack: f.Stack, Consumer: f.Consumer, Time: timePtr(f.Time), Count: f.Count, Raw: f.Raw}
		if f.HasPartition {
			p := f.Partition
			j.Partition = &p
		}
		if f.HasOffset {
			o := f.Offset
			j.Offset = &o
		}
		out[i] = j
	}
	return out
}

// decodedEvidence is everything Lily reads from a set of headers.
type decodedEvidence struct {
	Lily     lilyEvidenceJSON `json:"lily"`
	Problems []string         `json:"problems"`
	Foreign  []foreignJSON    `json:"foreign"`
}

func decodeEvidence(h transport.Headers) decodedEvidence {
	rec, err := evidence.Decode(h)
	out := decodedEvidence{Lily: lilyJSON(rec), Problems: []string{}, Foreign: foreignList(evidence.DecodeForeign(h))}
	for _, e := range unwrapJoined(err) {
		out.Problems = append(out.Problems, e.Error())
	}
	return out
}

func unwrapJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

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

// headerText renders each header value with its type, for display.
func headerText(h transport.Headers) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = evidence.FormatRaw(v)
	}
	return out
}

func sortedHeaderNames(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Body formats of --body.
const (
	bodyAuto = "auto"
	bodyText = "text"
	bodyJSON = "json"
	bodyHex  = "hex"
)

// bodyView is a body rendered for output.
type bodyView struct {
	// Format is json, text, hex, empty or erased.
	Format string `json:"format"`
	Size   int    `json:"size"`
	// Value is the body: a JSON value, the text, or hex digits.
	Value any `json:"value,omitempty"`
	// Note says why the requested format was not used.
	Note string `json:"note,omitempty"`
	raw  []byte
}

func validBodyFormat(f string) error {
	switch f {
	case bodyAuto, bodyText, bodyJSON, bodyHex:
		return nil
	}
	return usagef("--body %q: must be auto, text, json or hex", f)
}

// renderBody renders b as asked: auto picks JSON for a JSON document, text
// for printable UTF-8 and hex for anything else. A body that is not what
// was asked for (json) falls back with a note; it is never altered.
func renderBody(b []byte, format string, erased bool) bodyView {
	v := bodyView{Size: len(b), raw: b}
	switch {
	case erased:
		v.Format = "erased"
		return v
	case len(b) == 0:
		v.Format = "empty"
		return v
	}
	isJSON := json.Valid(b)
	printable := utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool {
		return !unicode.IsPrint(r) && r != '\n' && r != '\r' && r != '\t'
	})
	switch format {
	case bodyJSON:
		if !isJSON {
			v.Note = "the body is not valid JSON; shown as " + map[bool]string{true: "text", false: "hex"}[printable]
			format = bodyAuto
		}
	case bodyText:
		if !utf8.Valid(b) {
			v.Note = "the body is not valid UTF-8: invalid bytes are shown as U+FFFD"
		}
	}
	if format == bodyAuto {
		switch {
		case isJSON:
			format = bodyJSON
		case printable:
			format = bodyText
		default:
			format = bodyHex
		}
	}
	v.Format = format
	switch format {
	case bodyJSON:
		v.Value = json.RawMessage(b)
	case bodyText:
		v.Value = strings.ToValidUTF8(string(b), "\uFFFD")
	default:
		v.Value = hex.EncodeToString(b)
	}
	return v
}

// print writes the body for people: pretty JSON, the text, or a hex dump.
func (v bodyView) print(w io.Writer) {
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
		if err := json.Indent(&buf, v.raw, "  ", "  "); err != nil {
			buf.Reset()
			buf.Write(v.raw)
		}
		fmt.Fprintf(w, "  %s\n", buf.String())
	case bodyText:
		fmt.Fprintln(w, indentLines(v.Value.(string), "  "))
	default:
		fmt.Fprint(w, indentLines(hex.Dump(v.raw), "  ")+"\n")
	}
}

// errNotJSONObject is returned by readHeaders for input that is not a JSON
// object.
var errNotJSONObject = errors.New("want one JSON object of headers, e.g. {\"x-death\": [{\"reason\": \"rejected\", \"queue\": \"orders\", \"count\": 3}]}")
