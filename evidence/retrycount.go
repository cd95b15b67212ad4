package evidence

import (
	"errors"
	"fmt"
	"time"
)

// MaxRetryCount is the largest canonical x-retry-count (retry_attempts is 0..100).
const MaxRetryCount = 100

// MaxRawBytes bounds the text FormatRaw returns, so that a hostile header cannot bloat
// the evidence.
const MaxRawBytes = 256

// ErrInvalidRetryCount is wrapped by every error about a non-canonical x-retry-count.
// A message carrying one is dead-lettered with ReasonInvalidRetryCount; it is never
// silently reset.
var ErrInvalidRetryCount = errors.New("invalid x-retry-count")

// RetryCountError reports a non-canonical x-retry-count. It wraps ErrInvalidRetryCount;
// its message quotes the raw value and its Go type, e.g.
//
//	x-retry-count "0" (string): must be an integer 0..100
type RetryCountError struct {
	// Value is the raw header value as found.
	Value any
}

// Error returns the message, naming the raw value and its Go type.
func (e *RetryCountError) Error() string {
	return fmt.Sprintf("%s %s: must be an integer 0..%d", HeaderRetryCount, FormatRaw(e.Value), MaxRetryCount)
}

// Unwrap returns ErrInvalidRetryCount.
func (e *RetryCountError) Unwrap() error { return ErrInvalidRetryCount }

// RetryCount returns the canonical x-retry-count of h (DESIGN §7).
//
// Absent means 0 with a nil error. Present, the value must be an AMQP integer — a Go
// int8, int16, int32, int64, int, uint8, uint16 or uint32 — in 0..MaxRetryCount.
// Anything else (a string such as "0", a float even if integral such as 3.0, a bool,
// nil, a negative value, a value over 100) is not canonical: RetryCount then returns 0
// and a *RetryCountError wrapping ErrInvalidRetryCount. Transports whose headers are
// bytes (Kafka) must convert to an integer type before calling RetryCount.
func RetryCount(h map[string]any) (n int, err error) {
	v, ok := h[HeaderRetryCount]
	if !ok {
		return 0, nil
	}
	var x int64
	switch c := v.(type) {
	case int8:
		x = int64(c)
	case int16:
		x = int64(c)
	case int32:
		x = int64(c)
	case int64:
		x = c
	case int:
		x = int64(c)
	case uint8:
		x = int64(c)
	case uint16:
		x = int64(c)
	case uint32:
		x = int64(c)
	default:
		return 0, &RetryCountError{Value: v}
	}
	if x < 0 || x > MaxRetryCount {
		return 0, &RetryCountError{Value: v}
	}
	return int(x), nil
}

// SetRetryCount writes n as x-retry-count in its canonical type, int32 (AMQP long-int).
// n should be in 0..MaxRetryCount; a value outside is written as is (clamped to the int32
// range), so that the next RetryCount rejects it loudly instead of it being hidden here.
func SetRetryCount(h map[string]any, n int) {
	h[HeaderRetryCount] = saturate32(n)
}

// RedriveCount returns x-lily-redrive-count. It accepts any integer type and decimal text
// (string or []byte). Absent, negative, out-of-range or unreadable values count as 0:
// callers that must tell "invalid" from "zero" (for example to enforce max_redrives) use
// Decode, which reports the problem.
func RedriveCount(h map[string]any) int {
	n, ok := intOf(h[HeaderRedriveCount])
	if !ok || n < 0 || n > maxInt32 {
		return 0
	}
	return int(n)
}

// SetRedriveCount writes n as x-lily-redrive-count, as int32.
func SetRedriveCount(h map[string]any, n int) {
	h[HeaderRedriveCount] = saturate32(n)
}

const maxInt32 = 1<<31 - 1

// FormatRaw describes a raw header value for evidence: its value and its Go type, e.g.
// `"0" (string)`, `-1 (int32)`, `3 (float64)`, `true (bool)`, `"7" ([]byte)` or `nil`.
// Text values are quoted with Go escaping; the result is at most MaxRawBytes long.
func FormatRaw(v any) string {
	var val, typ string
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		val, typ = fmt.Sprintf("%q", x), "string"
	case []byte:
		val, typ = fmt.Sprintf("%q", x), "[]byte"
	case time.Time:
		val, typ = x.Format(time.RFC3339Nano), "time.Time"
	default:
		val, typ = fmt.Sprintf("%v", v), fmt.Sprintf("%T", v)
	}
	suffix := " (" + typ + ")"
	return Truncate(val, MaxRawBytes-len(suffix)) + suffix
}
