package evidence

import (
	"errors"
	"fmt"
	"strings"
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
// its message quotes the raw value and its Go type (and, for the AMQP field types, the
// AMQP type name), e.g.
//
//	x-retry-count "0" (string): must be an int32 (AMQP long-int) in 0..100
//	x-retry-count 3 (int64, AMQP long-long-int): must be an int32 (AMQP long-int) in 0..100
type RetryCountError struct {
	// Value is the raw header value as found.
	Value any
}

// Error returns the message, naming the raw value and its Go type.
func (e *RetryCountError) Error() string {
	raw := FormatRaw(e.Value)
	if name := amqpTypeName(e.Value); name != "" && strings.HasSuffix(raw, ")") {
		raw = raw[:len(raw)-1] + ", AMQP " + name + ")"
	}
	return fmt.Sprintf("%s %s: must be an int32 (AMQP long-int) in 0..%d", HeaderRetryCount, raw, MaxRetryCount)
}

// Unwrap returns ErrInvalidRetryCount.
func (e *RetryCountError) Unwrap() error { return ErrInvalidRetryCount }

// amqpTypeName names the AMQP 0-9-1 field type that amqp091-go decodes into v's Go type
// ("" for a type that is no AMQP field type).
func amqpTypeName(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case int8:
		return "short-short-int"
	case uint8:
		return "short-short-uint"
	case int16:
		return "short-int"
	case uint16:
		return "short-uint"
	case int32:
		return "long-int"
	case uint32:
		return "long-uint"
	case int64:
		return "long-long-int"
	case float32:
		return "float"
	case float64:
		return "double"
	case string:
		return "long-string"
	case []byte:
		return "byte-array"
	case time.Time:
		return "timestamp"
	case []any:
		return "field-array"
	case map[string]any:
		return "field-table"
	}
	return ""
}

// RetryCount returns the canonical x-retry-count of h (docs/design.md §7, 001_*: "if present it
// must be an AMQP LongInt in 0..100").
//
// Absent means 0 with a nil error. Present, the value must be a Go int32 — the AMQP
// long-int, the type Lily writes (SetRetryCount) — in 0..MaxRetryCount. Every other type
// is not canonical, other integer types included: int8, int16 and int64 (AMQP
// short-short, short and long-long), the unsigned uint8, uint16 and uint32, Go int, a
// string such as "0", a float even if integral such as 3.0, a decimal, a bool, nil, a
// list or a table; so is a negative value or one over 100. RetryCount then returns 0 and
// a *RetryCountError wrapping ErrInvalidRetryCount, whose message (and FormatRaw, which
// the dead-letter evidence keeps as x-lily-raw-retry-count) names the raw value and its
// type. The message is dead-lettered with reason invalid_retry_count, never silently
// reset.
//
// Each transport maps its own canonical wire form to int32 before calling RetryCount:
//
//   - RabbitMQ: the AMQP long-int field type 'I' (amqp091-go decodes it as int32).
//     Every other field type — 'b', 'B', 's', 'u', 'i', 'l', 'f', 'd', 'D', 'S', 'x',
//     't', 'T', 'A', 'F', 'V' — arrives as another Go type and is refused.
//   - Kafka: record headers are bytes. A record Lily wrote lists the header's type in
//     x-lily-header-types; only the type code "i32" is canonical. A record another
//     producer wrote carries decimal text ("3"), which kafka.DecodeHeaders turns into
//     int32 when it is a plain decimal within the int32 range; anything else stays
//     []byte and is refused.
//   - SQLite: headers are stored as Lily's typed JSON (transport.MarshalHeaders);
//     {"i32": n} is canonical, every other type code (i8, i16, i64, s, ...) is refused.
func RetryCount(h map[string]any) (n int, err error) {
	v, ok := h[HeaderRetryCount]
	if !ok {
		return 0, nil
	}
	x, ok := v.(int32)
	if !ok || x < 0 || x > MaxRetryCount {
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
