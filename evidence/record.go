package evidence

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// TimeLayout is the layout of Lily's time headers: RFC 3339 with milliseconds, always
// formatted in UTC, e.g. 2026-11-29T12:00:00.123Z.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// ErrInvalidHeader is wrapped by every problem Decode reports, except those about
// x-retry-count, which wrap ErrInvalidRetryCount.
var ErrInvalidHeader = errors.New("invalid evidence header")

// Record is the evidence of one dead-lettering (docs/design.md §7): why, what error, where it
// failed, the history and the failing code's identity. The zero value of each field
// means "unknown" and is not written.
//
// Record only carries text; it does not redact. Pass it through Redactor.Scrub before
// Apply so that the error message and stack are redacted and bounded.
type Record struct {
	// Reason is why the message was dead-lettered.
	Reason Reason
	// ErrorType is the Go type of the error, e.g. "*json.SyntaxError".
	ErrorType string
	// ErrorMessage is the error message (redacted, ≤ MaxErrorMessageBytes after Scrub).
	ErrorMessage string
	// ErrorStack is the stack of a recovered panic (≤ MaxErrorStackBytes after Scrub).
	ErrorStack string
	// Source is where the message failed: transport and queue or topic.
	Source string
	// SourcePartition is the source partition; meaningful only when HasPartition.
	SourcePartition int32
	// HasPartition reports whether SourcePartition is known.
	HasPartition bool
	// SourceOffset is the source offset; meaningful only when HasOffset.
	SourceOffset int64
	// HasOffset reports whether SourceOffset is known.
	HasOffset bool
	// SourceMessageID is the broker's message ID at the source.
	SourceMessageID string
	// DeliveryCount is the broker-side delivery count at the time of dead-lettering.
	DeliveryCount int
	// RetryCount is the canonical x-retry-count at the time of dead-lettering. It is
	// meaningless, and not written, when RawRetryCount is set.
	RetryCount int
	// RedriveCount is how many times the message had been redriven.
	RedriveCount int
	// RawRetryCount is the non-canonical x-retry-count as FormatRaw describes it; set
	// with ReasonInvalidRetryCount.
	RawRetryCount string
	// HoldKey is, with ReasonParked, the held key the message waits behind (see
	// HeaderHoldKey).
	HoldKey string
	// HoldMode is, with ReasonParked, the queue's ordering: "park" or "block" (see
	// HeaderHoldMode).
	HoldMode string
	// FirstFailureAt is the time of the first failure.
	FirstFailureAt time.Time
	// LastFailureAt is the time of the last failure.
	LastFailureAt time.Time
	// DeadLetteredAt is the time of dead-lettering.
	DeadLetteredAt time.Time
	// Consumer is the failing consumer's name.
	Consumer string
	// ConsumerVersion is the failing consumer's build version.
	ConsumerVersion string
	// Host is the host the failing consumer ran on.
	Host string
	// Traceparent is the W3C trace context, preserved as received.
	Traceparent string
}

// Apply writes r into the headers h, which must not be nil.
//
// The evidence headers (those EvidenceHeaders lists) belong to the dead-lettering that r
// describes: each is set from its field or, when the field is empty, removed, so that no
// stale evidence of an earlier dead-lettering survives. Text is written as string,
// SourcePartition, DeliveryCount, RetryCount and RedriveCount as int32, SourceOffset as
// int64, times in UTC with TimeLayout (sub-millisecond digits are dropped).
//
// The message's own headers are written only when r sets them and never removed:
// x-retry-count (when RetryCount is not 0 and RawRetryCount is empty — a non-canonical
// value stays as received), x-lily-redrive-count (when not 0) and traceparent (when not
// empty). Apply touches no other header, does not redact and has no body to alter.
//
// Decode of the headers Apply wrote into an empty map returns r for every r whose times are
// whole milliseconds in UTC (or zero), whose DeliveryCount, RetryCount and RedriveCount are
// in range (0..MaxInt32, RetryCount 0..MaxRetryCount) and whose RetryCount is 0 when
// RawRetryCount is set.
func (r Record) Apply(h map[string]any) {
	setText(h, HeaderReason, string(r.Reason))
	setText(h, HeaderErrorType, r.ErrorType)
	setText(h, HeaderErrorMessage, r.ErrorMessage)
	setText(h, HeaderErrorStack, r.ErrorStack)
	setText(h, HeaderSource, r.Source)
	if r.HasPartition {
		h[HeaderSourcePartition] = r.SourcePartition
	} else {
		delete(h, HeaderSourcePartition)
	}
	if r.HasOffset {
		h[HeaderSourceOffset] = r.SourceOffset
	} else {
		delete(h, HeaderSourceOffset)
	}
	setText(h, HeaderSourceMessageID, r.SourceMessageID)
	if r.DeliveryCount != 0 {
		h[HeaderDeliveryCount] = saturate32(r.DeliveryCount)
	} else {
		delete(h, HeaderDeliveryCount)
	}
	// The three times are often the same instant (a first failure that is
	// dead-lettered at once): each distinct one is formatted once.
	var tc timeCache
	tc.set(h, HeaderFirstFailureAt, r.FirstFailureAt)
	tc.set(h, HeaderLastFailureAt, r.LastFailureAt)
	tc.set(h, HeaderDeadLetteredAt, r.DeadLetteredAt)
	setText(h, HeaderConsumer, r.Consumer)
	setText(h, HeaderConsumerVersion, r.ConsumerVersion)
	setText(h, HeaderHost, r.Host)
	setText(h, HeaderRawRetryCount, r.RawRetryCount)
	setText(h, HeaderHoldKey, r.HoldKey)
	setText(h, HeaderHoldMode, r.HoldMode)

	if r.RawRetryCount == "" && r.RetryCount != 0 {
		SetRetryCount(h, r.RetryCount)
	}
	if r.RedriveCount != 0 {
		SetRedriveCount(h, r.RedriveCount)
	}
	if r.Traceparent != "" {
		h[HeaderTraceparent] = r.Traceparent
	}
}

func setText(h map[string]any, name, v string) {
	if v == "" {
		delete(h, name)
		return
	}
	h[name] = v
}

// timeCache remembers the last time header value set, so that the same
// instant is formatted (and boxed) once.
type timeCache struct {
	t time.Time
	v any
}

// set is setTime, reusing the previous value when t is the same instant.
func (c *timeCache) set(h map[string]any, name string, t time.Time) {
	if t.IsZero() {
		delete(h, name)
		return
	}
	if c.v == nil || !t.Equal(c.t) {
		c.t, c.v = t, FormatTime(t)
	}
	h[name] = c.v
}

// FormatTime formats t as Lily's time headers do: UTC, TimeLayout.
func FormatTime(t time.Time) string {
	return t.UTC().Format(TimeLayout)
}

// Decode reads the evidence in h back into a Record, tolerantly: text may arrive as
// string or []byte (Kafka); numbers as any integer type, an integral float or decimal
// text; times as RFC 3339 text with any precision or as time.Time. x-retry-count keeps its
// canonical rules (see RetryCount).
//
// Decode always returns the record filled as far as possible. Every problem found — a
// header of the wrong type, an unparsable number or time, an unknown reason, a
// non-canonical x-retry-count not already explained by x-lily-raw-retry-count — is
// reported in the error, one wrapped error per header (errors.Join), each naming the
// header and its raw value and wrapping ErrInvalidHeader or ErrInvalidRetryCount. A value
// that is not text where text is expected is kept in its FormatRaw form.
func Decode(h map[string]any) (Record, error) {
	d := decoder{h: h}
	var r Record
	r.Reason = Reason(d.text(HeaderReason))
	if r.Reason != "" && !r.Reason.Valid() {
		d.problem(HeaderReason, "unknown reason")
	}
	r.ErrorType = d.text(HeaderErrorType)
	r.ErrorMessage = d.text(HeaderErrorMessage)
	r.ErrorStack = d.text(HeaderErrorStack)
	r.Source = d.text(HeaderSource)
	var n int64
	if n, r.HasPartition = d.int(HeaderSourcePartition, math.MinInt32, math.MaxInt32); r.HasPartition {
		r.SourcePartition = int32(n)
	}
	r.SourceOffset, r.HasOffset = d.int(HeaderSourceOffset, math.MinInt64, math.MaxInt64)
	r.SourceMessageID = d.text(HeaderSourceMessageID)
	if n, ok := d.int(HeaderDeliveryCount, 0, math.MaxInt32); ok {
		r.DeliveryCount = int(n)
	}
	if n, ok := d.int(HeaderRedriveCount, 0, math.MaxInt32); ok {
		r.RedriveCount = int(n)
	}
	r.FirstFailureAt = d.time(HeaderFirstFailureAt)
	r.LastFailureAt = d.time(HeaderLastFailureAt)
	r.DeadLetteredAt = d.time(HeaderDeadLetteredAt)
	r.Consumer = d.text(HeaderConsumer)
	r.ConsumerVersion = d.text(HeaderConsumerVersion)
	r.Host = d.text(HeaderHost)
	r.Traceparent = d.text(HeaderTraceparent)
	r.RawRetryCount = d.text(HeaderRawRetryCount)
	r.HoldKey = d.text(HeaderHoldKey)
	r.HoldMode = d.text(HeaderHoldMode)

	rc, err := RetryCount(h)
	r.RetryCount = rc
	if err != nil && r.RawRetryCount == "" {
		r.RawRetryCount = FormatRaw(h[HeaderRetryCount])
		d.errs = append(d.errs, err)
	}
	return r, errors.Join(d.errs...)
}

// decoder reads headers and collects problems.
type decoder struct {
	h    map[string]any
	errs []error
}

func (d *decoder) problem(name, why string) {
	d.errs = append(d.errs, fmt.Errorf("%s %s: %s: %w", name, FormatRaw(d.h[name]), why, ErrInvalidHeader))
}

func (d *decoder) text(name string) string {
	v, ok := d.h[name]
	if !ok {
		return ""
	}
	if s, ok := textOf(v); ok {
		return s
	}
	d.problem(name, "must be text")
	if v == nil {
		return ""
	}
	return FormatRaw(v)
}

func (d *decoder) int(name string, lo, hi int64) (int64, bool) {
	v, ok := d.h[name]
	if !ok {
		return 0, false
	}
	n, ok := intOf(v)
	if !ok {
		d.problem(name, "must be an integer")
		return 0, false
	}
	if n < lo || n > hi {
		d.problem(name, fmt.Sprintf("must be in %d..%d", lo, hi))
		return 0, false
	}
	return n, true
}

func (d *decoder) time(name string) time.Time {
	v, ok := d.h[name]
	if !ok {
		return time.Time{}
	}
	t, ok := timeOf(v)
	if !ok {
		d.problem(name, "must be an RFC 3339 time")
	}
	return t
}
