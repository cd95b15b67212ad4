package evidence

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRetryCount(t *testing.T) {
	tests := []struct {
		name    string
		h       map[string]any
		want    int
		wantErr string // substring of the error; "" means no error
	}{
		{"absent", map[string]any{}, 0, ""},
		{"nil map", nil, 0, ""},
		{"int32 0", map[string]any{HeaderRetryCount: int32(0)}, 0, ""},
		{"int32 3", map[string]any{HeaderRetryCount: int32(3)}, 3, ""},
		{"int32 100", map[string]any{HeaderRetryCount: int32(100)}, 100, ""},
		// Only the AMQP long-int (int32) is canonical (001_*): every other integer type,
		// however small its value, is refused with its value and type in the message.
		{"int8", map[string]any{HeaderRetryCount: int8(7)}, 0, `x-retry-count 7 (int8, AMQP short-short-int): must be an int32 (AMQP long-int) in 0..100`},
		{"int16", map[string]any{HeaderRetryCount: int16(7)}, 0, `7 (int16, AMQP short-int)`},
		{"int64", map[string]any{HeaderRetryCount: int64(7)}, 0, `7 (int64, AMQP long-long-int)`},
		{"int", map[string]any{HeaderRetryCount: 7}, 0, `7 (int)`},
		{"uint8", map[string]any{HeaderRetryCount: uint8(7)}, 0, `7 (uint8, AMQP short-short-uint)`},
		{"uint16", map[string]any{HeaderRetryCount: uint16(7)}, 0, `7 (uint16, AMQP short-uint)`},
		{"uint32", map[string]any{HeaderRetryCount: uint32(7)}, 0, `7 (uint32, AMQP long-uint)`},
		{"int64 0", map[string]any{HeaderRetryCount: int64(0)}, 0, `0 (int64, AMQP long-long-int)`},
		{"string 0", map[string]any{HeaderRetryCount: "0"}, 0, `x-retry-count "0" (string, AMQP long-string): must be an int32 (AMQP long-int) in 0..100`},
		{"bytes 1", map[string]any{HeaderRetryCount: []byte("1")}, 0, `"1" ([]byte, AMQP byte-array)`},
		{"negative", map[string]any{HeaderRetryCount: int32(-1)}, 0, `-1 (int32, AMQP long-int)`},
		{"101", map[string]any{HeaderRetryCount: int32(101)}, 0, `101 (int32, AMQP long-int)`},
		{"huge int64", map[string]any{HeaderRetryCount: int64(math.MaxInt64)}, 0, `9223372036854775807 (int64, AMQP long-long-int)`},
		{"float 3.0", map[string]any{HeaderRetryCount: 3.0}, 0, `3 (float64, AMQP double)`},
		{"float32", map[string]any{HeaderRetryCount: float32(2)}, 0, `(float32, AMQP float)`},
		{"bool", map[string]any{HeaderRetryCount: true}, 0, `true (bool, AMQP boolean)`},
		{"nil value", map[string]any{HeaderRetryCount: nil}, 0, `x-retry-count nil`},
		{"uint64", map[string]any{HeaderRetryCount: uint64(1)}, 0, `1 (uint64)`},
		{"time", map[string]any{HeaderRetryCount: time.Unix(0, 0).UTC()}, 0, `(time.Time, AMQP timestamp)`},
		{"list", map[string]any{HeaderRetryCount: []any{int32(1)}}, 0, `([]interface {}, AMQP field-array)`},
		{"table", map[string]any{HeaderRetryCount: map[string]any{"n": int32(1)}}, 0, `(map[string]interface {}, AMQP field-table)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := RetryCount(tt.h)
			if n != tt.want {
				t.Errorf("n = %d, want %d", n, tt.want)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("err = nil, want %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidRetryCount) {
				t.Errorf("err %v does not wrap ErrInvalidRetryCount", err)
			}
			var rce *RetryCountError
			if !errors.As(err, &rce) {
				t.Errorf("err %T is not a *RetryCountError", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestRetryCountErrorMessage(t *testing.T) {
	_, err := RetryCount(map[string]any{HeaderRetryCount: "0"})
	if got, want := err.Error(), `x-retry-count "0" (string, AMQP long-string): must be an int32 (AMQP long-int) in 0..100`; got != want {
		t.Errorf("err = %q, want %q", got, want)
	}
}

func TestSetRetryCount(t *testing.T) {
	h := map[string]any{"other": "x"}
	SetRetryCount(h, 5)
	if v, ok := h[HeaderRetryCount].(int32); !ok || v != 5 {
		t.Fatalf("x-retry-count = %#v, want int32(5)", h[HeaderRetryCount])
	}
	if n, err := RetryCount(h); n != 5 || err != nil {
		t.Errorf("RetryCount = %d, %v", n, err)
	}
	if h["other"] != "x" || len(h) != 2 {
		t.Errorf("other headers touched: %v", h)
	}
	// Out of range is written as is, so that it is rejected loudly later.
	SetRetryCount(h, 101)
	if _, err := RetryCount(h); !errors.Is(err, ErrInvalidRetryCount) {
		t.Errorf("101 accepted after SetRetryCount: %v", err)
	}
	SetRetryCount(h, math.MaxInt64)
	if v := h[HeaderRetryCount].(int32); v != math.MaxInt32 {
		t.Errorf("saturation: %d", v)
	}
	for n := 0; n <= MaxRetryCount; n++ {
		SetRetryCount(h, n)
		if got, err := RetryCount(h); got != n || err != nil {
			t.Fatalf("round trip %d: %d, %v", n, got, err)
		}
	}
}

func TestRedriveCount(t *testing.T) {
	tests := []struct {
		v    any
		want int
	}{
		{int32(2), 2},
		{int64(3), 3},
		{uint8(4), 4},
		{"5", 5},
		{[]byte("6"), 6},
		{7.0, 7},
		{int32(-1), 0},
		{"x", 0},
		{true, 0},
		{nil, 0},
		{int64(math.MaxInt64), 0},
	}
	for _, tt := range tests {
		if got := RedriveCount(map[string]any{HeaderRedriveCount: tt.v}); got != tt.want {
			t.Errorf("RedriveCount(%s) = %d, want %d", FormatRaw(tt.v), got, tt.want)
		}
	}
	if got := RedriveCount(map[string]any{}); got != 0 {
		t.Errorf("absent: %d", got)
	}
	h := map[string]any{}
	SetRedriveCount(h, 3)
	if v, ok := h[HeaderRedriveCount].(int32); !ok || v != 3 {
		t.Errorf("SetRedriveCount wrote %#v", h[HeaderRedriveCount])
	}
	if RedriveCount(h) != 3 {
		t.Error("round trip")
	}
}

func TestFormatRaw(t *testing.T) {
	type named int32
	tests := []struct {
		v    any
		want string
	}{
		{nil, "nil"},
		{"0", `"0" (string)`},
		{"a\"b\n", `"a\"b\n" (string)`},
		{[]byte("7"), `"7" ([]byte)`},
		{[]byte{0xff}, `"\xff" ([]byte)`},
		{int32(-1), "-1 (int32)"},
		{int64(101), "101 (int64)"},
		{3.0, "3 (float64)"},
		{2.5, "2.5 (float64)"},
		{true, "true (bool)"},
		{named(4), "4 (evidence.named)"},
		{time.Date(2026, 11, 29, 12, 0, 0, 123e6, time.UTC), "2026-11-29T12:00:00.123Z (time.Time)"},
	}
	for _, tt := range tests {
		if got := FormatRaw(tt.v); got != tt.want {
			t.Errorf("FormatRaw(%#v) = %q, want %q", tt.v, got, tt.want)
		}
	}
	long := FormatRaw(strings.Repeat("x", 10000))
	if len(long) > MaxRawBytes || !strings.HasSuffix(long, TruncatedSuffix+" (string)") {
		t.Errorf("long value: %d bytes, %q", len(long), long[len(long)-30:])
	}
}
