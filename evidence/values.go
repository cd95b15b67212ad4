package evidence

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// This file holds the tolerant readers shared by Decode and DecodeForeign.

// textOf returns v as text when it is a string, a []byte or a named string type.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case nil:
		return "", false
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.String {
		return rv.String(), true
	}
	return "", false
}

// Text reads a header value as text: a string, a []byte (how Kafka and
// AMQP clients other than Lily carry text) or a named string type.
func Text(v any) (string, bool) { return textOf(v) }

// Int reads an integer header value the way Decode reads Lily's numeric headers
// (x-lily-delivery-count, x-lily-source-partition, ...): any Go integer type, an
// integral float, a json.Number or decimal text (string or []byte, surrounding spaces
// ignored). It is not the x-retry-count check: use RetryCount for that.
func Int(v any) (int64, bool) { return intOf(v) }

// intOf returns v as an integer when it is any Go integer type, an integral float, a
// json.Number or decimal text (string or []byte, surrounding spaces ignored).
func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		if uint64(x) > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case float32:
		return floatInt(float64(x))
	case float64:
		return floatInt(x)
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case string:
		return decimal(x)
	case []byte:
		return decimal(string(x))
	}
	return 0, false
}

func floatInt(f float64) (int64, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

func decimal(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil
}

// timeOf returns v as a UTC time when it is a time.Time or RFC 3339 text (any number of
// fractional digits).
func timeOf(v any) (time.Time, bool) {
	if t, ok := v.(time.Time); ok {
		// A binary timestamp (AMQP 'T': any int64 of seconds) outside RFC 3339's
		// years 0000..9999 cannot be written back as a time header: refused, so that
		// what Decode returns survives Apply (found by FuzzDecode).
		if t = t.UTC(); !rfc3339Year(t) {
			return time.Time{}, false
		}
		return t, true
	}
	s, ok := textOf(v)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// rfc3339Year reports whether t's year can be written in RFC 3339 (0000..9999).
func rfc3339Year(t time.Time) bool { return t.Year() >= 0 && t.Year() <= 9999 }

// asList returns v as a list when it is a slice or array other than bytes ([]any,
// []string, a named list type of an AMQP client, ...).
func asList(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case nil, []byte, string:
		return nil, false
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, false
	}
	if rv.Type().Elem().Kind() == reflect.Uint8 {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// asTable returns v as a table when it is a map with string keys (map[string]any or a
// named table type such as an AMQP client's Table).
func asTable(v any) (map[string]any, bool) {
	if m, ok := v.(map[string]any); ok {
		return m, true
	}
	if v == nil {
		return nil, false
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return nil, false
	}
	out := make(map[string]any, rv.Len())
	it := rv.MapRange()
	for it.Next() {
		out[it.Key().String()] = it.Value().Interface()
	}
	return out, true
}

// render returns v as display text for the Raw maps of foreign evidence: text as is
// ([]byte that is not UTF-8 as 0x-hex), times as RFC 3339 UTC, lists joined by commas,
// tables as sorted key=value pairs, nil as "".
func render(v any) string {
	if v == nil {
		return ""
	}
	if b, ok := v.([]byte); ok {
		if utf8.Valid(b) {
			return string(b)
		}
		return "0x" + hex.EncodeToString(b)
	}
	if s, ok := textOf(v); ok {
		return s
	}
	if t, ok := v.(time.Time); ok {
		return t.UTC().Format(time.RFC3339Nano)
	}
	if l, ok := asList(v); ok {
		parts := make([]string, len(l))
		for i, e := range l {
			parts[i] = render(e)
		}
		return strings.Join(parts, ",")
	}
	if m, ok := asTable(v); ok {
		keys := sortedKeys(m)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + render(m[k])
		}
		return "{" + strings.Join(parts, " ") + "}"
	}
	return fmt.Sprint(v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// saturate32 converts n to int32, clamping it to the int32 range.
func saturate32(n int) int32 {
	switch {
	case n > math.MaxInt32:
		return math.MaxInt32
	case n < math.MinInt32:
		return math.MinInt32
	}
	return int32(n)
}
