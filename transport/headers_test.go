package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func roundTrip(t *testing.T, h Headers) Headers {
	t.Helper()
	data, err := MarshalHeaders(h)
	if err != nil {
		t.Fatalf("MarshalHeaders(%v): %v", h, err)
	}
	if !json.Valid(data) {
		t.Fatalf("MarshalHeaders wrote invalid JSON: %s", data)
	}
	got, err := UnmarshalHeaders(data)
	if err != nil {
		t.Fatalf("UnmarshalHeaders(%s): %v", data, err)
	}
	return got
}

func TestHeadersRoundTripEveryType(t *testing.T) {
	ts := time.Date(2026, 11, 29, 12, 34, 56, 123456789, time.UTC)
	tests := []struct {
		name string
		v    any
	}{
		{"string", "hello"},
		{"empty string", ""},
		{"string zero", "0"},
		{"unicode", "ğüşöç ไทย \u0000 \"quoted\""},
		{"bytes", []byte{0, 1, 2, 0xff, 0xfe}},
		{"empty bytes", []byte{}},
		{"true", true},
		{"false", false},
		{"int8", int8(-128)},
		{"int8 zero", int8(0)},
		{"int16", int16(32767)},
		{"int32", int32(0)},
		{"int32 max", int32(math.MaxInt32)},
		{"int32 min", int32(math.MinInt32)},
		{"int64", int64(0)},
		{"int64 max", int64(math.MaxInt64)},
		{"int64 min", int64(math.MinInt64)},
		{"uint8", uint8(255)},
		{"uint16", uint16(math.MaxUint16)},
		{"uint32", uint32(math.MaxUint32)},
		{"decimal", Decimal{Scale: 2, Value: 1234}},
		{"decimal negative", Decimal{Scale: 9, Value: math.MinInt32}},
		{"decimal zero scale", Decimal{Value: 7}},
		{"float32", float32(3.1415927)},
		{"float32 tiny", float32(math.SmallestNonzeroFloat32)},
		{"float64", 0.1},
		{"float64 max", math.MaxFloat64},
		{"float64 tiny", math.SmallestNonzeroFloat64},
		{"float64 negative", -2.5e-300},
		{"float64 inf", math.Inf(1)},
		{"float64 -inf", math.Inf(-1)},
		{"float32 inf", float32(math.Inf(1))},
		{"float32 -inf", float32(math.Inf(-1))},
		{"time utc nanos", ts},
		{"time zero", time.Time{}},
		{"nil", nil},
		{"empty array", []any{}},
		{"array", []any{"a", int32(1), int64(1), "1", []byte("b"), nil, true, 2.5, float32(1.5), ts}},
		{"nested arrays", []any{[]any{}, []any{[]any{int8(1)}}, map[string]any{}}},
		{"unsigned and decimals nested", []any{uint8(1), map[string]any{"d": Decimal{Scale: 1, Value: -5}, "u": uint32(9)}}},
		{"empty table", map[string]any{}},
		{"nested table", map[string]any{
			"count":  int32(3),
			"reason": "expired",
			"queues": []any{"a", "b"},
			"time":   ts,
			"deeper": map[string]any{"raw": []byte("x"), "nil": nil, "empty": []any{}},
		}},
		{"x-death like", []any{
			map[string]any{"count": int64(1), "reason": "rejected", "queue": "orders.created",
				"time": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "routing-keys": []any{"orders.created"}},
		}},
	}
	// All in one table too: the keys must not interfere.
	all := Headers{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Headers{"k": tt.v}
			got := roundTrip(t, h)
			if !reflect.DeepEqual(got, h) {
				t.Errorf("round trip of %T:\n got %#v\nwant %#v", tt.v, got["k"], tt.v)
			}
		})
		all[tt.name] = tt.v
	}
	if got := roundTrip(t, all); !reflect.DeepEqual(got, all) {
		t.Errorf("round trip of all types:\n got %#v\nwant %#v", got, all)
	}
}

// TestHeadersKeepIntegerTypes: the type is the contract of x-retry-count
// (docs/design.md §7): int32 1, int64 1 and "1" stay distinct.
func TestHeadersKeepIntegerTypes(t *testing.T) {
	h := Headers{"a": int32(0), "b": int64(0), "c": "0", "d": int16(0), "e": int8(0), "f": float64(0), "g": float32(0)}
	got := roundTrip(t, h)
	for k, v := range h {
		if reflect.TypeOf(got[k]) != reflect.TypeOf(v) {
			t.Errorf("%s: type %T, want %T", k, got[k], v)
		}
		if got[k] != v {
			t.Errorf("%s: %#v, want %#v", k, got[k], v)
		}
	}
}

// TestHeadersNormalisedTypes: Go's int, which is no AMQP type, is stored
// as int64; the AMQP unsigned types keep their type (docs/design.md §7: headers
// travel as sent).
func TestHeadersNormalisedTypes(t *testing.T) {
	tests := []struct {
		in, want any
	}{
		{int(-7), int64(-7)},
		{int(math.MaxInt64), int64(math.MaxInt64)},
		{uint8(255), uint8(255)},
		{uint16(65535), uint16(65535)},
		{uint32(math.MaxUint32), uint32(math.MaxUint32)},
	}
	for _, tt := range tests {
		got := roundTrip(t, Headers{"k": tt.in})["k"]
		if got != tt.want {
			t.Errorf("%T %v came back as %T %v, want %T %v", tt.in, tt.in, got, got, tt.want, tt.want)
		}
	}
	// Headers (the alias) nested is the same as map[string]any.
	nested := Headers{"k": Headers{"n": int32(1)}}
	if got := roundTrip(t, nested); !reflect.DeepEqual(got, nested) {
		t.Errorf("nested Headers: %#v", got)
	}
}

// TestDecimalString: the plain notation of AMQP decimals.
func TestDecimalString(t *testing.T) {
	for _, tt := range []struct {
		d    Decimal
		want string
	}{
		{Decimal{Scale: 2, Value: 1234}, "12.34"},
		{Decimal{Scale: 3, Value: 5}, "0.005"},
		{Decimal{Scale: 1, Value: -5}, "-0.5"},
		{Decimal{Value: -12}, "-12"},
	} {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestHeadersNaN(t *testing.T) {
	got := roundTrip(t, Headers{"f64": math.NaN(), "f32": float32(math.NaN()), "arr": []any{math.NaN()}})
	f64, ok := got["f64"].(float64)
	if !ok || !math.IsNaN(f64) {
		t.Errorf("f64 = %#v, want float64 NaN", got["f64"])
	}
	f32, ok := got["f32"].(float32)
	if !ok || !math.IsNaN(float64(f32)) {
		t.Errorf("f32 = %#v, want float32 NaN", got["f32"])
	}
	arr, ok := got["arr"].([]any)
	if !ok || len(arr) != 1 {
		t.Fatalf("arr = %#v", got["arr"])
	}
	if f, ok := arr[0].(float64); !ok || !math.IsNaN(f) {
		t.Errorf("arr[0] = %#v, want float64 NaN", arr[0])
	}
}

func TestHeadersNegativeZero(t *testing.T) {
	got := roundTrip(t, Headers{"z": math.Copysign(0, -1)})
	f, ok := got["z"].(float64)
	if !ok || f != 0 || !math.Signbit(f) {
		t.Errorf("-0 came back as %#v (signbit %v)", got["z"], math.Signbit(f))
	}
}

func TestHeadersTimeZoneAndNanoseconds(t *testing.T) {
	zones := []*time.Location{
		time.UTC,
		time.FixedZone("", 5*3600+30*60),
		time.FixedZone("", -3*3600),
		time.FixedZone("ICT", 7*3600),
	}
	for _, loc := range zones {
		in := time.Date(2026, 2, 28, 23, 59, 59, 999999999, loc)
		got, ok := roundTrip(t, Headers{"t": in})["t"].(time.Time)
		if !ok {
			t.Fatalf("zone %v: not a time.Time", loc)
		}
		if !got.Equal(in) {
			t.Errorf("zone %v: %v, want %v", loc, got, in)
		}
		if got.Nanosecond() != 999999999 {
			t.Errorf("zone %v: nanoseconds %d, want 999999999", loc, got.Nanosecond())
		}
		_, gotOff := got.Zone()
		_, wantOff := in.Zone()
		if gotOff != wantOff {
			t.Errorf("zone %v: offset %d, want %d", loc, gotOff, wantOff)
		}
		if got.Format(time.RFC3339Nano) != in.Format(time.RFC3339Nano) {
			t.Errorf("zone %v: %s, want %s", loc, got.Format(time.RFC3339Nano), in.Format(time.RFC3339Nano))
		}
	}
}

func TestMarshalHeadersEmptyAndSorted(t *testing.T) {
	for _, h := range []Headers{nil, {}} {
		data, err := MarshalHeaders(h)
		if err != nil || string(data) != "{}" {
			t.Errorf("MarshalHeaders(%#v) = %s, %v; want {}", h, data, err)
		}
	}
	for _, data := range [][]byte{nil, {}, []byte("{}"), []byte("null")} {
		h, err := UnmarshalHeaders(data)
		if err != nil || h == nil || len(h) != 0 {
			t.Errorf("UnmarshalHeaders(%q) = %#v, %v; want an empty non-nil map", data, h, err)
		}
	}
	a, err := MarshalHeaders(Headers{"b": "2", "a": "1", "c": map[string]any{"z": 1, "y": 2}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		b, _ := MarshalHeaders(Headers{"c": map[string]any{"y": 2, "z": 1}, "a": "1", "b": "2"})
		if string(a) != string(b) {
			t.Fatalf("encoding not deterministic:\n%s\n%s", a, b)
		}
	}
	if ia, ib := strings.Index(string(a), `"a"`), strings.Index(string(a), `"b"`); ia < 0 || ia > ib {
		t.Errorf("keys not sorted: %s", a)
	}
}

func TestMarshalHeadersUnsupported(t *testing.T) {
	tests := []struct {
		name  string
		h     Headers
		names []string
	}{
		{"struct", Headers{"ok": "x", "x-bad": struct{}{}}, []string{`"x-bad"`, "struct {}"}},
		{"uint64", Headers{"x-big": uint64(1)}, []string{`"x-big"`, "uint64"}},
		{"uint", Headers{"x-uint": uint(1)}, []string{`"x-uint"`, "uint"}},
		{"string slice", Headers{"x-list": []string{"a"}}, []string{`"x-list"`, "[]string"}},
		{"typed map", Headers{"x-map": map[string]string{"a": "b"}}, []string{`"x-map"`, "map[string]string"}},
		{"in nested table", Headers{"outer": map[string]any{"inner": complex(1, 2)}}, []string{`"outer"`, `"inner"`, "complex128"}},
		{"in array", Headers{"x-arr": []any{int32(1), make(chan int)}}, []string{`"x-arr"`, "chan int"}},
		{"pointer", Headers{"x-ptr": new(int)}, []string{`"x-ptr"`, "*int"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := MarshalHeaders(tt.h)
			if err == nil {
				t.Fatalf("MarshalHeaders accepted it: %s", data)
			}
			for _, want := range tt.names {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestUnmarshalHeadersErrors(t *testing.T) {
	tests := map[string]string{
		"not json":      `{"a":`,
		"not an object": `[1,2]`,
		"untyped value": `{"x-a":{}}`,
		"bad base64":    `{"x-a":{"b":"!!!"}}`,
		"bad float":     `{"x-a":{"f64":"one"}}`,
		"bad time":      `{"x-a":{"ts":"yesterday"}}`,
		"bad nested":    `{"x-a":{"tbl":{"x-b":{}}}}`,
		"int overflow":  `{"x-a":{"i8":300}}`,
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			h, err := UnmarshalHeaders([]byte(data))
			if err == nil {
				t.Fatalf("UnmarshalHeaders(%s) = %#v, want an error", data, h)
			}
		})
	}
	_, err := UnmarshalHeaders([]byte(`{"x-named":{}}`))
	if err == nil || !strings.Contains(err.Error(), `"x-named"`) {
		t.Errorf("error %v does not name the header", err)
	}
}

func TestCloneHeadersIsDeep(t *testing.T) {
	if CloneHeaders(nil) != nil {
		t.Error("CloneHeaders(nil) is not nil")
	}
	orig := Headers{
		"s":     "x",
		"b":     []byte("abc"),
		"n":     int32(1),
		"arr":   []any{[]byte("in-array"), map[string]any{"k": []byte("deep")}},
		"table": map[string]any{"raw": []byte("raw"), "list": []any{"a"}},
	}
	snapshot, err := MarshalHeaders(orig)
	if err != nil {
		t.Fatal(err)
	}
	c := CloneHeaders(orig)
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone differs:\n%#v\n%#v", c, orig)
	}
	c["s"] = "changed"
	c["new"] = true
	c["b"].([]byte)[0] = 'X'
	arr := c["arr"].([]any)
	arr[0].([]byte)[0] = 'X'
	arr[1].(map[string]any)["k"].([]byte)[0] = 'X'
	arr[1].(map[string]any)["added"] = 1
	tbl := c["table"].(map[string]any)
	tbl["raw"].([]byte)[0] = 'X'
	tbl["list"].([]any)[0] = "changed"
	delete(tbl, "raw")

	after, err := MarshalHeaders(orig)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(snapshot) {
		t.Errorf("mutating the clone changed the original:\nbefore %s\nafter  %s", snapshot, after)
	}
	if _, ok := orig["new"]; ok {
		t.Error("key added to the clone appeared in the original")
	}
}

func TestSettleError(t *testing.T) {
	e1 := errors.New("lease lost")
	e2 := errors.New("db gone")
	se := &SettleError{Errs: []error{nil, e1, nil, e2}}
	if got, want := se.Error(), "settle: 2 of 4 not applied; first: lease lost"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for i, want := range []error{nil, e1, nil, e2, nil} {
		if got := se.Err(i); got != want {
			t.Errorf("Err(%d) = %v, want %v", i, got, want)
		}
	}
	if se.Err(-1) != nil || se.Err(99) != nil {
		t.Error("Err out of range is not nil")
	}
	if got := (&SettleError{Errs: []error{nil}}).Error(); got != "settle: no failures" {
		t.Errorf("no failures: %q", got)
	}
}

func TestSettleErrors(t *testing.T) {
	leaseLost := fmt.Errorf("x: %w", ErrLeaseLost)
	other := errors.New("connection reset")
	tests := []struct {
		name string
		err  error
		n    int
		want []error
	}{
		{"nil", nil, 3, []error{nil, nil, nil}},
		{"nil zero", nil, 0, []error{}},
		{"settle error", &SettleError{Errs: []error{nil, leaseLost, nil}}, 3, []error{nil, leaseLost, nil}},
		{"wrapped settle error", fmt.Errorf("transport: %w", &SettleError{Errs: []error{leaseLost, nil}}), 2, []error{leaseLost, nil}},
		{"settle error shorter than n", &SettleError{Errs: []error{leaseLost}}, 3, []error{leaseLost, nil, nil}},
		{"settle error longer than n", &SettleError{Errs: []error{nil, nil, leaseLost}}, 2, []error{nil, nil}},
		{"other error", other, 3, []error{other, other, other}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SettleErrors(tt.err, tt.n)
			if len(got) != tt.n {
				t.Fatalf("len = %d, want %d", len(got), tt.n)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("[%d] = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
	se := &SettleError{Errs: []error{leaseLost}}
	out := SettleErrors(se, 1)
	out[0] = nil
	if se.Errs[0] == nil {
		t.Error("SettleErrors returned the SettleError's own slice")
	}
	if !errors.Is(SettleErrors(se, 1)[0], ErrLeaseLost) {
		t.Error("per-settlement error does not wrap ErrLeaseLost")
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{Ack: "ack", Retry: "retry", DeadLetter: "dead_letter", Release: "release", 0: "unknown", 99: "unknown"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", int(a), got, want)
		}
	}
}
