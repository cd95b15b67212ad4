// Package entryview renders catalog entries and dead-letter evidence as
// JSON-ready views: Lily's evidence and foreign evidence decoded, headers
// with their types, and the body as JSON, text or hex. The CLI ('lily dlq
// show', 'lily evidence decode') and the HTTP API share it, so that both
// show the same thing.
package entryview

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Entry is one entry as 'lily dlq show' and 'lily dlq peek' print it.
type Entry struct {
	// Location is "catalog", or "broker_dlq" for a dead letter still in a
	// broker's DLQ (not ingested yet; it has no ID).
	Location        string        `json:"location"`
	ID              int64         `json:"id,omitempty"`
	Queue           string        `json:"queue"`
	EventID         string        `json:"event_id"`
	Key             string        `json:"key,omitempty"`
	Type            string        `json:"type,omitempty"`
	State           catalog.State `json:"state,omitempty"`
	Reason          string        `json:"reason"`
	ErrorType       string        `json:"error_type,omitempty"`
	ErrorMessage    string        `json:"error_message,omitempty"`
	Fingerprint     string        `json:"fingerprint,omitempty"`
	ConsumerVersion string        `json:"consumer_version,omitempty"`
	Source          string        `json:"source,omitempty"`
	DeliveryCount   int           `json:"delivery_count"`
	RetryCount      int           `json:"retry_count"`
	RedriveCount    int           `json:"redrive_count"`
	DeadLetteredAt  time.Time     `json:"dead_lettered_at"`
	UpdatedAt       *time.Time    `json:"updated_at,omitempty"`
	DecidedAt       *time.Time    `json:"decided_at,omitempty"`
	DecidedBy       string        `json:"decided_by,omitempty"`
	Decision        string        `json:"decision,omitempty"`
	ErasedAt        *time.Time    `json:"erased_at,omitempty"`
	BodySHA256      string        `json:"body_sha256"`
	// BodySize and HeadersSize are the sizes in bytes, kept when the data
	// was removed (erase, discard, expire).
	BodySize    int64             `json:"body_size"`
	HeadersSize int64             `json:"headers_size"`
	Evidence    Evidence          `json:"evidence"`
	Headers     map[string]string `json:"headers"`
	Body        Body              `json:"body"`
	// Versions are the body's versions when it was edited ('lily dlq
	// edit'; diff.go): the original (0) first, each with its diff. Body is
	// the original; a redrive sends the last version.
	Versions []Version `json:"versions,omitempty"`
	// Triage is who owns the entry, its status, ticket and notes — its own
	// and its group's (queue + fingerprint); set by the caller
	// (catalog.Store.EntryTriage), absent when neither has any.
	Triage *catalog.EntryTriage `json:"triage,omitempty"`
}

// New renders catalog entry e; location is "catalog", or "broker_dlq" for
// a dead letter still in a broker's DLQ; bodyFormat is one of the Body
// formats.
func New(e *catalog.Entry, location, bodyFormat string) Entry {
	v := Entry{Location: location, ID: e.ID, Queue: e.Queue, EventID: e.EventID, Key: e.Key, Type: e.Type, State: e.State,
		Reason: e.Reason, ErrorType: e.ErrorType, ErrorMessage: e.ErrorMessage, Fingerprint: e.Fingerprint,
		ConsumerVersion: e.ConsumerVersion, Source: e.Source, DeliveryCount: e.DeliveryCount, RetryCount: e.RetryCount,
		RedriveCount: e.RedriveCount, DeadLetteredAt: e.DeadLetteredAt, DecidedAt: TimePtr(e.DecidedAt), DecidedBy: e.DecidedBy,
		Decision: e.Decision, ErasedAt: TimePtr(e.ErasedAt), BodySHA256: e.BodySHA256,
		BodySize: e.BodySize, HeadersSize: e.HeadersSize,
		Evidence: DecodeEvidence(e.Headers), Headers: HeaderText(e.Headers),
		Body: RenderBody(e.Body, bodyFormat, !e.ErasedAt.IsZero())}
	if location == "catalog" {
		v.UpdatedAt = TimePtr(e.UpdatedAt)
	}
	return v
}

// LilyEvidence is Lily's evidence (evidence.Record) as JSON.
type LilyEvidence struct {
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

// TimePtr returns &t, or nil for the zero time.
func TimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func lilyView(r evidence.Record) LilyEvidence {
	return LilyEvidence{Reason: string(r.Reason), ErrorType: r.ErrorType, ErrorMessage: r.ErrorMessage, ErrorStack: r.ErrorStack,
		Source: r.Source, SourceMessageID: r.SourceMessageID, DeliveryCount: r.DeliveryCount, RetryCount: r.RetryCount,
		RawRetryCount: r.RawRetryCount, RedriveCount: r.RedriveCount, FirstFailureAt: TimePtr(r.FirstFailureAt),
		LastFailureAt: TimePtr(r.LastFailureAt), DeadLetteredAt: TimePtr(r.DeadLetteredAt), Consumer: r.Consumer,
		ConsumerVersion: r.ConsumerVersion, Host: r.Host, Traceparent: r.Traceparent,
		SourcePartition: ptrIf(r.HasPartition, r.SourcePartition), SourceOffset: ptrIf(r.HasOffset, r.SourceOffset)}
}

// ptrIf returns &v when ok, else nil.
func ptrIf[T any](ok bool, v T) *T {
	if !ok {
		return nil
	}
	return &v
}

// Foreign is decoded foreign evidence (evidence.ForeignEvidence) as JSON.
type Foreign struct {
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

func foreignViews(fs []evidence.ForeignEvidence) []Foreign {
	out := make([]Foreign, len(fs))
	for i, f := range fs {
		out[i] = Foreign{System: f.System, Origin: f.Origin, Reason: f.Reason, Source: f.Source, ExceptionType: f.ExceptionType,
			Message: f.Message, Stack: f.Stack, Consumer: f.Consumer, Time: TimePtr(f.Time), Count: f.Count, Raw: f.Raw,
			Partition: ptrIf(f.HasPartition, f.Partition), Offset: ptrIf(f.HasOffset, f.Offset)}
	}
	return out
}

// Evidence is everything Lily reads from a set of headers.
type Evidence struct {
	Lily LilyEvidence `json:"lily"`
	// Attempts are the message's failed attempts (x-lily-attempts): the
	// first, then the most recent; AttemptsDropped more were between them.
	Attempts        []Attempt `json:"attempts"`
	AttemptsDropped int       `json:"attempts_dropped"`
	Problems        []string  `json:"problems"`
	Foreign         []Foreign `json:"foreign"`
}

// Attempt is one failed attempt (evidence.Attempt) as JSON.
type Attempt struct {
	At            time.Time `json:"at"`
	RetryCount    int       `json:"retry_count"`
	DeliveryCount int       `json:"delivery_count,omitempty"`
	ErrorType     string    `json:"error_type,omitempty"`
	ErrorMessage  string    `json:"error_message,omitempty"`
	Outcome       string    `json:"outcome"`
}

// DecodeEvidence decodes Lily's evidence, the attempt history and foreign
// evidence from h. A history that does not decode is a problem beside the
// rest.
func DecodeEvidence(h transport.Headers) Evidence {
	rec, err := evidence.Decode(h)
	hist, herr := evidence.DecodeAttempts(h)
	out := Evidence{Lily: lilyView(rec), Attempts: make([]Attempt, len(hist.Attempts)), AttemptsDropped: hist.Dropped,
		Problems: []string{}, Foreign: foreignViews(evidence.DecodeForeign(h))}
	for i, a := range hist.Attempts {
		out.Attempts[i] = Attempt{At: a.At, RetryCount: a.RetryCount, DeliveryCount: a.DeliveryCount, ErrorType: a.ErrorType,
			ErrorMessage: a.ErrorMessage, Outcome: string(a.Outcome)}
	}
	for _, e := range append(UnwrapJoined(err), UnwrapJoined(herr)...) {
		out.Problems = append(out.Problems, e.Error())
	}
	return out
}

// UnwrapJoined splits an errors.Join result into its parts.
func UnwrapJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// HeaderText renders each header value with its type, for display.
func HeaderText(h transport.Headers) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = evidence.FormatRaw(v)
	}
	return out
}

// Body formats.
const (
	BodyAuto = "auto"
	BodyText = "text"
	BodyJSON = "json"
	BodyHex  = "hex"
)

// Body is a body rendered for output.
type Body struct {
	// Format is json, text, hex, empty or erased.
	Format string `json:"format"`
	Size   int    `json:"size"`
	// Value is the body: a JSON value, the text, or hex digits.
	Value any `json:"value,omitempty"`
	// Note says why the requested format was not used.
	Note string `json:"note,omitempty"`
	Raw  []byte `json:"-"`
}

// ValidBodyFormat reports whether f is a body format: auto, text, json or
// hex.
func ValidBodyFormat(f string) bool {
	switch f {
	case BodyAuto, BodyText, BodyJSON, BodyHex:
		return true
	}
	return false
}

// RenderBody renders b as asked: auto picks JSON for a JSON document, text
// for printable UTF-8 and hex for anything else. A body that is not what
// was asked for (json) falls back with a note; it is never altered.
func RenderBody(b []byte, format string, erased bool) Body {
	v := Body{Size: len(b), Raw: b}
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
	case BodyJSON:
		if !isJSON {
			v.Note = "the body is not valid JSON; shown as " + map[bool]string{true: "text", false: "hex"}[printable]
			format = BodyAuto
		}
	case BodyText:
		if !utf8.Valid(b) {
			v.Note = "the body is not valid UTF-8: invalid bytes are shown as U+FFFD"
		}
	}
	if format == BodyAuto {
		switch {
		case isJSON:
			format = BodyJSON
		case printable:
			format = BodyText
		default:
			format = BodyHex
		}
	}
	v.Format = format
	switch format {
	case BodyJSON:
		v.Value = json.RawMessage(b)
	case BodyText:
		v.Value = strings.ToValidUTF8(string(b), "\uFFFD")
	default:
		v.Value = hex.EncodeToString(b)
	}
	return v
}
