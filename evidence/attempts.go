package evidence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// HeaderAttempts is a message's attempt history (docs/design.md §7.9): the failed
// attempts so far, each with its time, counts, error and outcome, as versioned JSON text.
// Every retry copy and the dead-letter copy carry it; like x-retry-count it is the
// message's own story rather than one dead-lettering's evidence, so Record.Apply leaves it
// alone, a redrive removes it and a release keeps it.
const HeaderAttempts = "x-lily-attempts"

// Bounds of the attempt history, so that a message retried a thousand times carries a
// header of at most MaxAttemptsBytes (brokers limit header sizes: RabbitMQ's frame_max,
// SQS's 256 KiB, Pub/Sub's attributes, Kafka's record size).
const (
	// AttemptsVersion is the version of HeaderAttempts' JSON ("v"). A new version is
	// only for an incompatible change; a field added to version 1 is ignored by older
	// readers.
	AttemptsVersion = 1
	// MaxRecentAttempts is how many of the most recent attempts are kept besides the
	// first one; those in between are dropped and counted.
	MaxRecentAttempts = 10
	// MaxAttemptMessageBytes bounds an attempt's error message (redacted first).
	MaxAttemptMessageBytes = 256
	// MaxAttemptTypeBytes bounds an attempt's error type.
	MaxAttemptTypeBytes = 128
	// MaxAttemptOutcomeBytes bounds an attempt's outcome text (an outcome written by a
	// newer Lily is kept as text).
	MaxAttemptOutcomeBytes = 32
	// MaxAttemptsBytes bounds the header's encoded size: older attempts (never the
	// first) are dropped until it fits.
	MaxAttemptsBytes = 4096
)

// shrunkTextBytes is what an attempt's error type and message are cut to when even the
// first and the last attempt do not fit MaxAttemptsBytes (text that JSON escapes up to
// six times its size); two attempts then always fit.
const shrunkTextBytes = 32

// Outcome is what the runtime did with a failed attempt.
type Outcome string

// Outcomes of a failed attempt.
const (
	// OutcomeImmediateRetry: the handler was called again at once, in process
	// (immediate_retries).
	OutcomeImmediateRetry Outcome = "immediate_retry"
	// OutcomeRetry: a retry copy went to a delay bucket.
	OutcomeRetry Outcome = "retry"
	// OutcomeHeld: the circuit breaker was open; the copy waits in a bucket with its
	// retry count unchanged.
	OutcomeHeld Outcome = "held"
	// OutcomeDeadLetter: the message was dead-lettered (the record's reason says why;
	// delivery_limit is a crash-type poison the handler never saw this time).
	OutcomeDeadLetter Outcome = "dead_letter"
)

// Attempt is one failed attempt of a message.
type Attempt struct {
	// At is when the attempt failed (UTC, milliseconds on the wire).
	At time.Time
	// RetryCount is the x-retry-count of the delivery that failed: 0 for the first
	// delivery (and for a non-canonical count).
	RetryCount int
	// DeliveryCount is the broker's delivery count of that delivery.
	DeliveryCount int
	// ErrorType is the Go type of the error (≤ MaxAttemptTypeBytes).
	ErrorType string
	// ErrorMessage is the error message, redacted, ≤ MaxAttemptMessageBytes.
	ErrorMessage string
	// Outcome is what the runtime did with the failure.
	Outcome Outcome
}

// Attempt returns the attempt r describes, with outcome o: its last failure time (else
// its dead-lettering time), counts, error type and message. r should have passed through
// Redactor.Scrub, so that the message is redacted before History cuts it to
// MaxAttemptMessageBytes.
func (r Record) Attempt(o Outcome) Attempt {
	at := r.LastFailureAt
	if at.IsZero() {
		at = r.DeadLetteredAt
	}
	rc := r.RetryCount
	if r.RawRetryCount != "" {
		rc = 0
	}
	return Attempt{At: at, RetryCount: rc, DeliveryCount: r.DeliveryCount, ErrorType: r.ErrorType,
		ErrorMessage: r.ErrorMessage, Outcome: o}
}

// History is a message's bounded attempt history: the first attempt, then the most recent
// ones, oldest first. Dropped counts the attempts between the first and the kept recent
// ones that were given up to stay within the bounds.
type History struct {
	Attempts []Attempt
	Dropped  int
}

// Add returns h with a appended and the bounds enforced (the first attempt and the most
// recent MaxRecentAttempts kept, text cut, at most MaxAttemptsBytes encoded). h is not
// modified.
func (h History) Add(a Attempt) History {
	return History{Attempts: append(slices.Clone(h.Attempts), a), Dropped: h.Dropped}.bounded()
}

// Apply writes h into the headers hs as HeaderAttempts, or removes the header when h has
// no attempt. It touches no other header.
func (h History) Apply(hs map[string]any) {
	b := h.bounded()
	if len(b.Attempts) == 0 {
		delete(hs, HeaderAttempts)
		return
	}
	hs[HeaderAttempts] = string(b.encode())
}

// AddAttempt adds a to the history the headers hs carry and writes it back: what the
// runtime does on every retry and dead-letter copy. A history hs carries that does not
// decode is replaced by one that starts with a, so that the copy carries a readable one.
func AddAttempt(hs map[string]any, a Attempt) {
	prev, _ := DecodeAttempts(hs)
	prev.Add(a).Apply(hs)
}

// DecodeAttempts reads HeaderAttempts from hs. An absent header is an empty history. A
// header that is not text, not JSON of a known version, or holds a value out of range is
// ignored — an empty history and one error naming the header and its raw value, wrapping
// ErrInvalidHeader — and never affects the rest of the evidence (Decode does not read
// it). What it returns is within the bounds, so Apply writes it back unchanged.
func DecodeAttempts(hs map[string]any) (History, error) {
	v, ok := hs[HeaderAttempts]
	if !ok {
		return History{}, nil
	}
	problem := func(why string) (History, error) {
		return History{}, fmt.Errorf("%s %s: %s: %w", HeaderAttempts, FormatRaw(v), why, ErrInvalidHeader)
	}
	s, ok := textOf(v)
	if !ok {
		return problem("must be JSON text")
	}
	var w wireHistory
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return problem(fmt.Sprintf("not the attempts JSON (%v)", err))
	}
	if w.V == nil || *w.V != AttemptsVersion {
		return problem(fmt.Sprintf("version must be %d", AttemptsVersion))
	}
	if w.Dropped < 0 || w.Dropped > math.MaxInt32 {
		return problem(fmt.Sprintf("dropped must be in 0..%d", math.MaxInt32))
	}
	out := History{Attempts: make([]Attempt, 0, len(w.Attempts)), Dropped: w.Dropped}
	for i, a := range w.Attempts {
		at, ok := timeOf(a.At)
		switch {
		case !ok:
			return problem(fmt.Sprintf("attempt %d: at must be an RFC 3339 time", i))
		case a.Retry < 0 || a.Retry > MaxRetryCount:
			return problem(fmt.Sprintf("attempt %d: retry must be in 0..%d", i, MaxRetryCount))
		case a.Delivery < 0 || a.Delivery > math.MaxInt32:
			return problem(fmt.Sprintf("attempt %d: delivery must be in 0..%d", i, math.MaxInt32))
		}
		out.Attempts = append(out.Attempts, Attempt{At: at, RetryCount: a.Retry, DeliveryCount: a.Delivery,
			ErrorType: a.Type, ErrorMessage: a.Message, Outcome: Outcome(a.Outcome)})
	}
	return out.bounded(), nil
}

// wireHistory is HeaderAttempts' JSON, version 1.
type wireHistory struct {
	V        *int          `json:"v"`
	Dropped  int           `json:"dropped,omitempty"`
	Attempts []wireAttempt `json:"attempts"`
}

type wireAttempt struct {
	At       string `json:"at"`
	Retry    int    `json:"retry"`
	Delivery int    `json:"delivery,omitempty"`
	Type     string `json:"type,omitempty"`
	Message  string `json:"message,omitempty"`
	Outcome  string `json:"outcome"`
}

// encode returns h's JSON. h must be within the bounds of the text (bounded does that).
func (h History) encode() []byte {
	v := AttemptsVersion
	w := wireHistory{V: &v, Dropped: h.Dropped, Attempts: make([]wireAttempt, len(h.Attempts))}
	for i, a := range h.Attempts {
		w.Attempts[i] = wireAttempt{At: FormatTime(a.At), Retry: a.RetryCount, Delivery: a.DeliveryCount,
			Type: a.ErrorType, Message: a.ErrorMessage, Outcome: string(a.Outcome)}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // error text stays readable: '<' is not \u003c
	if err := enc.Encode(w); err != nil {
		panic(fmt.Sprintf("evidence: encoding the attempt history: %v", err)) // plain strings and ints cannot fail
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// bounded returns h within every bound; it is idempotent, so what Decode returns is
// written back unchanged. Text is made valid UTF-8 (as JSON would) and cut; times go to
// UTC milliseconds; counts are clamped; then the attempts after the first are dropped,
// oldest first, down to MaxRecentAttempts and until the encoding fits MaxAttemptsBytes;
// if the first and the last alone do not fit, their text is cut to shrunkTextBytes.
func (h History) bounded() History {
	if len(h.Attempts) == 0 {
		return History{}
	}
	out := History{Attempts: make([]Attempt, len(h.Attempts)), Dropped: min(max(h.Dropped, 0), math.MaxInt32)}
	for i, a := range h.Attempts {
		a.At = a.At.UTC().Truncate(time.Millisecond)
		if !rfc3339Year(a.At) {
			a.At = time.Time{}.UTC()
		}
		a.RetryCount = min(max(a.RetryCount, 0), MaxRetryCount)
		a.DeliveryCount = min(max(a.DeliveryCount, 0), math.MaxInt32)
		a.ErrorType = cutText(a.ErrorType, MaxAttemptTypeBytes)
		a.ErrorMessage = cutText(a.ErrorMessage, MaxAttemptMessageBytes)
		a.Outcome = Outcome(cutText(string(a.Outcome), MaxAttemptOutcomeBytes))
		out.Attempts[i] = a
	}
	drop := func(n int) {
		out.Attempts = slices.Delete(out.Attempts, 1, 1+n)
		out.Dropped = min(out.Dropped+n, math.MaxInt32)
	}
	if n := len(out.Attempts) - 1 - MaxRecentAttempts; n > 0 {
		drop(n)
	}
	for len(out.Attempts) > 2 && len(out.encode()) > MaxAttemptsBytes {
		drop(1)
	}
	if len(out.encode()) > MaxAttemptsBytes {
		for i := range out.Attempts {
			out.Attempts[i].ErrorType = Truncate(out.Attempts[i].ErrorType, shrunkTextBytes)
			out.Attempts[i].ErrorMessage = Truncate(out.Attempts[i].ErrorMessage, shrunkTextBytes)
		}
	}
	return out
}

// cutText makes s valid UTF-8 (as JSON encoding would) and truncates it to n bytes.
func cutText(s string, n int) string {
	return Truncate(strings.ToValidUTF8(s, "\uFFFD"), n)
}
