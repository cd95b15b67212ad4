// Package fuzzval turns the bytes of a fuzz input into header maps with
// values of every type a transport can hand to Lily (the AMQP table types
// as Go types, and a few that are not: int, uint64), so that the fuzz
// targets of the decoders of untrusted headers (evidence, the retry count,
// the AMQP and Kafka header codecs) explore typed values, not only text.
package fuzzval

import (
	"encoding/binary"
	"math"
	"reflect"
	"time"
)

// Reader consumes a fuzz input. Once the input is used up every read
// returns zero values, so any input decodes to some headers.
type Reader struct {
	b []byte
}

// NewReader reads data.
func NewReader(data []byte) *Reader { return &Reader{b: data} }

// Byte returns the next byte (0 at the end).
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Bytes returns up to n next bytes.
func (r *Reader) Bytes(n int) []byte {
	n = min(n, len(r.b))
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// Uint64 returns the next 8 bytes as a big-endian integer (short input is
// zero-padded).
func (r *Reader) Uint64() uint64 {
	var buf [8]byte
	copy(buf[:], r.Bytes(8))
	return binary.BigEndian.Uint64(buf[:])
}

// Text returns a length-prefixed string (up to 255 bytes).
func (r *Reader) Text() string { return string(r.Bytes(int(r.Byte()))) }

// Kinds of Value, in the order of the kind byte.
const (
	KindNil = iota
	KindString
	KindBytes
	KindBool
	KindInt8
	KindInt16
	KindInt32
	KindInt64
	KindInt
	KindUint8
	KindUint16
	KindUint32
	KindUint64
	KindFloat32
	KindFloat64
	KindTime
	KindList
	KindTable
	kinds
)

// Value returns one value; lists and tables nest up to depth levels.
func (r *Reader) Value(depth int) any {
	u := r.Uint64
	switch k := int(r.Byte()) % kinds; k {
	case KindNil:
		return nil
	case KindString:
		return r.Text()
	case KindBytes:
		return []byte(r.Text())
	case KindBool:
		return r.Byte()&1 == 1
	case KindInt8:
		return int8(r.Byte())
	case KindInt16:
		return int16(u())
	case KindInt32:
		return int32(u())
	case KindInt64:
		return int64(u())
	case KindInt:
		return int(u())
	case KindUint8:
		return r.Byte()
	case KindUint16:
		return uint16(u())
	case KindUint32:
		return uint32(u())
	case KindUint64:
		return u()
	case KindFloat32:
		return math.Float32frombits(uint32(u()))
	case KindFloat64:
		return math.Float64frombits(u())
	case KindTime:
		// Seconds anywhere in the int64 range, as a hostile peer may send.
		return time.Unix(int64(u()), int64(r.Byte())*1e6).UTC()
	case KindList:
		if depth <= 0 {
			return []any{}
		}
		n := int(r.Byte() % 5)
		out := make([]any, n)
		for i := range out {
			out[i] = r.Value(depth - 1)
		}
		return out
	default: // KindTable
		if depth <= 0 {
			return map[string]any{}
		}
		return r.Headers(nil, depth-1)
	}
}

// Headers returns up to 15 headers. A name is either one of names (when
// given), so that the decoders' own headers are hit often, or arbitrary
// text.
func (r *Reader) Headers(names []string, depth int) map[string]any {
	n := int(r.Byte() % 16)
	h := make(map[string]any, n)
	for range n {
		k := r.Name(names)
		h[k] = r.Value(depth)
	}
	return h
}

// Name returns a header name: three times in four one of names (when
// given), else arbitrary text.
func (r *Reader) Name(names []string) string {
	if c := r.Byte(); len(names) > 0 && c%4 != 0 {
		return names[int(c/4)%len(names)]
	}
	return r.Text()
}

// Same is reflect.DeepEqual but NaN equals NaN and times compare with
// Equal, in lists ([]any) and tables (map[string]any) too: what a decoded
// header value is checked against after a round trip.
func Same(a, b any) bool { return SameNested(a, b, sameLeaf) }

func sameLeaf(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || (math.IsNaN(x) && math.IsNaN(y)))
	case float32:
		y, ok := b.(float32)
		return ok && (x == y || (x != x && y != y))
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	}
	return reflect.DeepEqual(a, b)
}

// SameNested compares a and b element by element through lists ([]any)
// and tables (map[string]any) of the same length, and every other value
// with leaf.
func SameNested(a, b any, leaf func(a, b any) bool) bool {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !SameNested(x[i], y[i], leaf) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k := range x {
			if !SameNested(x[k], y[k], leaf) {
				return false
			}
		}
		return true
	}
	return leaf(a, b)
}
