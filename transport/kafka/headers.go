package kafka

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Transport-owned headers. They are written by the transport and removed
// before a delivery reaches the runtime.
const (
	// HeaderTypes lists the Go type of every header Lily wrote on a record,
	// as a JSON object from header name to type code (see EncodeHeaders).
	HeaderTypes = "x-lily-header-types"
	// HeaderDueAt is when a retry copy becomes due, in Unix milliseconds
	// (decimal text).
	HeaderDueAt = "x-lily-due-at"
)

// Type codes of HeaderTypes.
const (
	typeString = "str"
	typeBytes  = "bytes"
	typeBool   = "bool"
	typeInt8   = "i8"
	typeInt16  = "i16"
	typeInt32  = "i32"
	typeInt64  = "i64"
	typeF32    = "f32"
	typeF64    = "f64"
	typeTime   = "time"
	typeNil    = "nil"
	typeJSON   = "json"
)

// EncodeHeaders converts Lily headers to Kafka record headers, sorted by
// name. Every value becomes readable text where it has one — strings as
// UTF-8, integers in decimal, bools as "true"/"false", floats in Go's
// shortest form ("NaN", "+Inf"), times in RFC 3339 with nanoseconds, nil
// as an empty value, []byte as is, lists, tables and AMQP decimals as
// Lily's typed JSON (transport.MarshalHeaders) — and one more header, x-lily-header-types,
// maps each name to its type code (str, bytes, bool, i8, i16, i32, i64,
// f32, f64, time, nil, json), so that DecodeHeaders gives back the same Go
// types: int32(3) stays int32, the string "0" stays a string. int is
// written as i64, uint8 as i16, uint16 as i32 and uint32 as i64. Consumers other than Lily see plain text
// values.
func EncodeHeaders(h transport.Headers) ([]kgo.RecordHeader, error) {
	names := make([]string, 0, len(h))
	for k := range h {
		if k != HeaderTypes {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	out := make([]kgo.RecordHeader, 0, len(names)+1)
	types := make(map[string]string, len(names))
	for _, k := range names {
		b, code, err := encodeValue(h[k])
		if err != nil {
			return nil, fmt.Errorf("kafka: header %q: %w", k, err)
		}
		out = append(out, kgo.RecordHeader{Key: k, Value: b})
		types[k] = code
	}
	if len(types) > 0 {
		m, err := json.Marshal(types)
		if err != nil {
			return nil, err
		}
		out = append(out, kgo.RecordHeader{Key: HeaderTypes, Value: m})
	}
	return out, nil
}

func encodeValue(v any) ([]byte, string, error) {
	switch x := v.(type) {
	case nil:
		return nil, typeNil, nil
	case string:
		return []byte(x), typeString, nil
	case []byte:
		return bytes.Clone(x), typeBytes, nil
	case bool:
		return []byte(strconv.FormatBool(x)), typeBool, nil
	case int8:
		return itob(int64(x)), typeInt8, nil
	case int16:
		return itob(int64(x)), typeInt16, nil
	case int32:
		return itob(int64(x)), typeInt32, nil
	case int64:
		return itob(x), typeInt64, nil
	case int:
		return itob(int64(x)), typeInt64, nil
	case uint8:
		return itob(int64(x)), typeInt16, nil
	case uint16:
		return itob(int64(x)), typeInt32, nil
	case uint32:
		return itob(int64(x)), typeInt64, nil
	case float32:
		return []byte(strconv.FormatFloat(float64(x), 'g', -1, 32)), typeF32, nil
	case float64:
		return []byte(strconv.FormatFloat(x, 'g', -1, 64)), typeF64, nil
	case time.Time:
		if err := checkYear(x); err != nil {
			return nil, "", err
		}
		return []byte(x.Format(time.RFC3339Nano)), typeTime, nil
	case []any, map[string]any, transport.Decimal:
		if err := checkYears(x); err != nil {
			return nil, "", err
		}
		b, err := transport.MarshalHeaders(transport.Headers{"v": x})
		return b, typeJSON, err
	}
	return nil, "", fmt.Errorf("unsupported header value type %T", v)
}

func itob(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

// checkYear refuses a time RFC 3339 cannot write (four-digit years): it
// would come back as bytes, not a time (found by FuzzKafkaHeaders).
func checkYear(t time.Time) error {
	if y := t.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("time %s: the year is outside RFC 3339's 0000..9999", t.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkYears is checkYear for every time in a list or table.
func checkYears(v any) error {
	switch x := v.(type) {
	case time.Time:
		return checkYear(x)
	case []any:
		for _, e := range x {
			if err := checkYears(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, e := range x {
			if err := checkYears(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeHeaders converts Kafka record headers back to Lily headers. A
// header listed in x-lily-header-types gets its Go type back (a value that
// does not parse as its listed type stays []byte). Any other header —
// written by another producer — stays []byte, byte for byte, with one
// exception: x-retry-count, x-lily-redrive-count and x-lily-schema-version
// in decimal text within the int32 range become int32, since Kafka clients
// write integers as text; anything else in them stays []byte and so is not
// canonical. A header Lily listed keeps the listed type: only "i32" is a
// canonical x-retry-count (evidence.RetryCount). When
// a name repeats, the last value wins. x-lily-header-types itself is not
// returned.
func DecodeHeaders(rh []kgo.RecordHeader) transport.Headers {
	if len(rh) == 0 {
		return transport.Headers{}
	}
	var types map[string]string
	for _, x := range rh {
		if x.Key == HeaderTypes {
			types = nil
			if err := json.Unmarshal(x.Value, &types); err != nil {
				types = nil
			}
		}
	}
	h := make(transport.Headers, len(rh))
	for _, x := range rh {
		if x.Key == HeaderTypes {
			continue
		}
		if code, ok := typeOf(types, x.Key, rh); ok {
			if v, ok := decodeValue(x.Value, code); ok {
				h[x.Key] = v
				continue
			}
		} else if x.Key == evidence.HeaderRetryCount || x.Key == evidence.HeaderRedriveCount || x.Key == evidence.HeaderSchemaVersion {
			if n, err := strconv.ParseInt(string(x.Value), 10, 32); err == nil {
				h[x.Key] = int32(n)
				continue
			}
		}
		h[x.Key] = bytes.Clone(x.Value)
	}
	return h
}

// typeOf returns the listed type code of the header named key. JSON,
// which x-lily-header-types is, cannot carry a name that is not valid
// UTF-8: encoding/json wrote each invalid byte as U+FFFD, so such a name is
// looked up that way, unless another header of the record maps to the same
// text (then the type is ambiguous and the value stays bytes). Found by
// FuzzKafkaHeaders: such a header lost its type.
func typeOf(types map[string]string, key string, rh []kgo.RecordHeader) (string, bool) {
	if code, ok := types[key]; ok || utf8.ValidString(key) {
		return code, ok
	}
	j := jsonKey(key)
	for _, x := range rh {
		if x.Key != key && jsonKey(x.Key) == j {
			return "", false
		}
	}
	code, ok := types[j]
	return code, ok
}

// jsonKey is s as encoding/json writes it: each byte of invalid UTF-8 as
// U+FFFD.
func jsonKey(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func decodeValue(b []byte, code string) (any, bool) {
	s := string(b)
	switch code {
	case typeNil:
		return nil, true
	case typeString:
		return s, true
	case typeBytes:
		return bytes.Clone(b), true
	case typeBool:
		v, err := strconv.ParseBool(s)
		return v, err == nil
	case typeInt8:
		n, err := strconv.ParseInt(s, 10, 8)
		return int8(n), err == nil
	case typeInt16:
		n, err := strconv.ParseInt(s, 10, 16)
		return int16(n), err == nil
	case typeInt32:
		n, err := strconv.ParseInt(s, 10, 32)
		return int32(n), err == nil
	case typeInt64:
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	case typeF32:
		f, err := strconv.ParseFloat(s, 32) // also reads NaN, +Inf, -Inf
		return float32(f), err == nil
	case typeF64:
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	case typeTime:
		t, err := time.Parse(time.RFC3339Nano, s)
		return t, err == nil
	case typeJSON:
		m, err := transport.UnmarshalHeaders(b)
		if err != nil {
			return nil, false
		}
		v, ok := m["v"]
		return v, ok
	}
	return nil, false
}

// message builds the record headers of m: its headers plus the event ID
// and type as Lily headers (the key is the record key).
func messageHeaders(m transport.Message, extra transport.Headers) ([]kgo.RecordHeader, error) {
	h := make(transport.Headers, len(m.Headers)+len(extra)+2)
	for k, v := range m.Headers {
		h[k] = v
	}
	delete(h, HeaderDueAt)
	if m.EventID != "" {
		h[evidence.HeaderEventID] = m.EventID
	}
	if m.Type != "" {
		h[evidence.HeaderType] = m.Type
	}
	for k, v := range extra {
		h[k] = v
	}
	return EncodeHeaders(h)
}

// recordMessage reads the message of a record: body, key, headers (less
// the transport's own), event ID (x-lily-event-id, or "<topic>/<partition>/
// <offset>" for a record written by another producer) and type.
func recordMessage(r *kgo.Record) (transport.Message, transport.Headers) {
	h := DecodeHeaders(r.Headers)
	var internal transport.Headers // nil (readable) unless the record has some
	if v, ok := h[HeaderDueAt]; ok {
		internal = transport.Headers{HeaderDueAt: v}
		delete(h, HeaderDueAt)
	}
	m := transport.Message{Body: r.Value, Headers: h}
	if r.Key != nil {
		m.Key = string(r.Key)
	}
	m.EventID = textHeader(h[evidence.HeaderEventID])
	if m.EventID == "" {
		m.EventID = recordID(r)
	}
	m.Type = textHeader(h[evidence.HeaderType])
	return m, internal
}

// recordID names a record by its coordinates.
func recordID(r *kgo.Record) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}

func textHeader(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}
