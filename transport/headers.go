package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Headers are message headers. Values use the AMQP table types as Go types:
// string, []byte, bool, int8, uint8, int16, uint16, int32, uint32, int64,
// float32, float64, Decimal, time.Time, nil, []any and Headers (or
// map[string]any) for nested tables. Types matter: x-retry-count must be
// an integer, and the string "0" is not canonical, so transports that
// store headers keep the types (see MarshalHeaders), and a header travels
// with the type it was sent with (docs/design.md §7): an AMQP decimal stays a
// Decimal, an unsigned integer stays unsigned.
type Headers = map[string]any

// Decimal is an AMQP decimal value (field type 'D'): Value × 10^-Scale.
// It is kept as sent, never turned into text or a float.
type Decimal struct {
	Scale uint8
	Value int32
}

// String returns the decimal in plain notation, e.g. "12.34".
func (d Decimal) String() string {
	s := strconv.FormatInt(int64(d.Value), 10)
	if d.Scale == 0 {
		return s
	}
	neg := d.Value < 0
	if neg {
		s = s[1:]
	}
	for len(s) <= int(d.Scale) {
		s = "0" + s
	}
	s = s[:len(s)-int(d.Scale)] + "." + s[len(s)-int(d.Scale):]
	if neg {
		s = "-" + s
	}
	return s
}

// CloneHeaders returns a deep copy of h (nil for nil).
func CloneHeaders(h Headers) Headers {
	if h == nil {
		return nil
	}
	out := make(Headers, len(h))
	for k, v := range h {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return bytes.Clone(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneValue(e)
		}
		return out
	case map[string]any:
		return CloneHeaders(x)
	}
	return v
}

// typedValue is the JSON form of one header value: exactly one field set.
type typedValue struct {
	S   *string         `json:"s,omitempty"`
	B   *string         `json:"b,omitempty"` // base64 bytes
	T   *bool           `json:"t,omitempty"`
	I8  *int8           `json:"i8,omitempty"`
	I16 *int16          `json:"i16,omitempty"`
	I32 *int32          `json:"i32,omitempty"`
	I64 *int64          `json:"i64,omitempty"`
	U8  *uint8          `json:"u8,omitempty"`
	U16 *uint16         `json:"u16,omitempty"`
	U32 *uint32         `json:"u32,omitempty"`
	Dec *decimalValue   `json:"dec,omitempty"`
	F32 *string         `json:"f32,omitempty"` // decimal, or NaN/+Inf/-Inf
	F64 *string         `json:"f64,omitempty"`
	Ts  *string         `json:"ts,omitempty"` // RFC 3339 nano
	N   bool            `json:"n,omitempty"`  // nil
	A   []typedValue    `json:"a,omitempty"`
	Tbl json.RawMessage `json:"tbl,omitempty"`
	// E marks an empty array (A omitted when empty).
	E bool `json:"e,omitempty"`
}

// decimalValue is the JSON form of a Decimal.
type decimalValue struct {
	Scale uint8 `json:"scale"`
	Value int32 `json:"value"`
}

// MarshalHeaders encodes headers as JSON that keeps each value's type, so
// that UnmarshalHeaders gives back the same Go types (int32 stays int32,
// uint8 stays uint8, a Decimal stays a Decimal, "0" stays a string). Keys
// are sorted. Go's int, which is no AMQP type, is stored as int64.
// Unsupported types are an error.
func MarshalHeaders(h Headers) ([]byte, error) {
	if len(h) == 0 {
		return []byte("{}"), nil
	}
	m, err := encodeTable(h)
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func encodeTable(h map[string]any) (map[string]typedValue, error) {
	m := make(map[string]typedValue, len(h))
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tv, err := encodeValue(h[k])
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		m[k] = tv
	}
	return m, nil
}

func fstr(f float64, bits int) *string {
	s := strconv.FormatFloat(f, 'g', -1, bits)
	return &s
}

func encodeValue(v any) (typedValue, error) {
	var tv typedValue
	switch x := v.(type) {
	case nil:
		tv.N = true
	case string:
		tv.S = &x
	case []byte:
		s := base64.StdEncoding.EncodeToString(x)
		tv.B = &s
	case bool:
		tv.T = &x
	case int8:
		tv.I8 = &x
	case int16:
		tv.I16 = &x
	case int32:
		tv.I32 = &x
	case int64:
		tv.I64 = &x
	case int:
		n := int64(x)
		tv.I64 = &n
	case uint8:
		tv.U8 = &x
	case uint16:
		tv.U16 = &x
	case uint32:
		tv.U32 = &x
	case Decimal:
		tv.Dec = &decimalValue{Scale: x.Scale, Value: x.Value}
	case float32:
		tv.F32 = fstr(float64(x), 32)
	case float64:
		tv.F64 = fstr(x, 64)
	case time.Time:
		s := x.Format(time.RFC3339Nano)
		tv.Ts = &s
	case []any:
		if len(x) == 0 {
			tv.E = true
		}
		for _, e := range x {
			etv, err := encodeValue(e)
			if err != nil {
				return tv, err
			}
			tv.A = append(tv.A, etv)
		}
	case map[string]any:
		m, err := encodeTable(x)
		if err != nil {
			return tv, err
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return tv, err
		}
		tv.Tbl = raw
	default:
		return tv, fmt.Errorf("unsupported header value type %T", v)
	}
	return tv, nil
}

// UnmarshalHeaders decodes what MarshalHeaders wrote.
func UnmarshalHeaders(data []byte) (Headers, error) {
	if len(data) == 0 {
		return Headers{}, nil
	}
	var m map[string]typedValue
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return decodeTable(m)
}

func decodeTable(m map[string]typedValue) (Headers, error) {
	h := make(Headers, len(m))
	for k, tv := range m {
		v, err := decodeValue(tv)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		h[k] = v
	}
	return h, nil
}

func decodeValue(tv typedValue) (any, error) {
	switch {
	case tv.N:
		return nil, nil
	case tv.S != nil:
		return *tv.S, nil
	case tv.B != nil:
		return base64.StdEncoding.DecodeString(*tv.B)
	case tv.T != nil:
		return *tv.T, nil
	case tv.I8 != nil:
		return *tv.I8, nil
	case tv.I16 != nil:
		return *tv.I16, nil
	case tv.I32 != nil:
		return *tv.I32, nil
	case tv.I64 != nil:
		return *tv.I64, nil
	case tv.U8 != nil:
		return *tv.U8, nil
	case tv.U16 != nil:
		return *tv.U16, nil
	case tv.U32 != nil:
		return *tv.U32, nil
	case tv.Dec != nil:
		return Decimal{Scale: tv.Dec.Scale, Value: tv.Dec.Value}, nil
	case tv.F32 != nil:
		f, err := strconv.ParseFloat(*tv.F32, 32) // also reads NaN, +Inf, -Inf
		return float32(f), err
	case tv.F64 != nil:
		return strconv.ParseFloat(*tv.F64, 64)
	case tv.Ts != nil:
		return time.Parse(time.RFC3339Nano, *tv.Ts)
	case tv.E:
		return []any{}, nil
	case tv.A != nil:
		out := make([]any, len(tv.A))
		for i, e := range tv.A {
			v, err := decodeValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case tv.Tbl != nil:
		var m map[string]typedValue
		if err := json.Unmarshal(tv.Tbl, &m); err != nil {
			return nil, err
		}
		return decodeTable(m)
	}
	return nil, fmt.Errorf("header value with no type")
}

// HeaderCounted is the ledger's mark on a message it counted as accepted
// on publish (ledger.HeaderCounted, value "1"), and HeaderAcceptedOn its
// mark on a message redriven to the queue that accepted it before
// (ledger.HeaderAcceptedOn, value: the queue). They are hints, not part of
// the message: a transport whose message would exceed a limit of the
// broker's (attribute count, header frame, message size) only because of
// them drops them (DropHint) rather than refuse the message — the
// consumer then counts the message on receipt, as one from any producer.
const (
	HeaderCounted    = "x-lily-counted"
	HeaderAcceptedOn = "x-lily-accepted-on"
)

// DropHint returns h without the ledger's hints (HeaderCounted,
// HeaderAcceptedOn), and whether it had any. h itself is left alone.
func DropHint(h Headers) (Headers, bool) {
	_, counted := h[HeaderCounted]
	_, on := h[HeaderAcceptedOn]
	if !counted && !on {
		return h, false
	}
	out := make(Headers, len(h))
	for k, v := range h {
		if k != HeaderCounted && k != HeaderAcceptedOn {
			out[k] = v
		}
	}
	return out, true
}
