package kafka_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

func TestHeadersRoundTrip(t *testing.T) {
	ts := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	in := transport.Headers{
		"s": "acme", "empty": "", "b": []byte{0, 0xff, 'x'}, "t": true, "f": false,
		"i8": int8(-8), "i16": int16(16), "i32": int32(-1), "i64": int64(1) << 40,
		"f32": float32(1.5), "f64": float64(3), "nan": math.NaN(), "inf": math.Inf(-1),
		"ts": ts, "nil": nil,
		"list": []any{"a", int32(1), []any{}}, "table": map[string]any{"k": int64(2), "n": nil},
		evidence.HeaderRetryCount: "0", // not canonical: must stay a string
	}
	rh, err := kafka.EncodeHeaders(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range rh {
		switch h.Key {
		case "i32":
			if string(h.Value) != "-1" {
				t.Errorf("i32 written as %q, want decimal text", h.Value)
			}
		case "t":
			if string(h.Value) != "true" {
				t.Errorf("bool written as %q", h.Value)
			}
		}
	}
	out := kafka.DecodeHeaders(rh)
	if _, ok := out[kafka.HeaderTypes]; ok {
		t.Error("the type list leaked into the headers")
	}
	for k, want := range in {
		got := out[k]
		switch k {
		case "nan":
			if f, ok := got.(float64); !ok || !math.IsNaN(f) {
				t.Errorf("nan: %#v", got)
			}
			continue
		case "ts":
			if tt, ok := got.(time.Time); !ok || !tt.Equal(ts) {
				t.Errorf("ts: %#v", got)
			}
			continue
		case "table":
			m, _ := got.(transport.Headers)
			if !reflect.DeepEqual(map[string]any(m), want) {
				t.Errorf("table: %#v", got)
			}
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v (%T), want %#v (%T)", k, got, got, want, want)
		}
	}
	// int and the unsigned types widen as transport.MarshalHeaders does.
	rh, _ = kafka.EncodeHeaders(transport.Headers{"int": 7, "u8": uint8(8), "u16": uint16(16), "u32": uint32(32)})
	out = kafka.DecodeHeaders(rh)
	if out["int"] != int64(7) || out["u8"] != int16(8) || out["u16"] != int32(16) || out["u32"] != int64(32) {
		t.Errorf("widened integers: %#v", out)
	}
	if _, err := kafka.EncodeHeaders(transport.Headers{"c": complex(1, 2)}); err == nil {
		t.Error("a complex header was accepted")
	}
}

// TestForeignHeaders checks headers written by other producers: bytes as
// they are, except integer-valued x-retry-count and x-lily-redrive-count.
func TestForeignHeaders(t *testing.T) {
	rh := []kgo.RecordHeader{
		{Key: "kafka_dlt-original-partition", Value: []byte{0, 0, 0, 2}},
		{Key: "tenant", Value: []byte("acme")},
		{Key: evidence.HeaderRetryCount, Value: []byte("3")},
		{Key: evidence.HeaderRedriveCount, Value: []byte("1")},
		{Key: "dup", Value: []byte("first")},
		{Key: "dup", Value: []byte("last")},
	}
	h := kafka.DecodeHeaders(rh)
	if b, ok := h["kafka_dlt-original-partition"].([]byte); !ok || !bytes.Equal(b, []byte{0, 0, 0, 2}) {
		t.Errorf("binary header %#v, want the raw bytes", h["kafka_dlt-original-partition"])
	}
	if b, ok := h["tenant"].([]byte); !ok || string(b) != "acme" {
		t.Errorf("text header %#v, want []byte", h["tenant"])
	}
	if n, err := evidence.RetryCount(h); err != nil || n != 3 {
		t.Errorf("retry count %d (%v), want 3", n, err)
	}
	if evidence.RedriveCount(h) != 1 {
		t.Errorf("redrive count %d, want 1", evidence.RedriveCount(h))
	}
	if string(h["dup"].([]byte)) != "last" {
		t.Errorf("repeated header %q, want the last value", h["dup"])
	}
	for _, raw := range []string{"abc", "3.0", " 3", "99999999999"} {
		h := kafka.DecodeHeaders([]kgo.RecordHeader{{Key: evidence.HeaderRetryCount, Value: []byte(raw)}})
		if _, err := evidence.RetryCount(h); err == nil {
			t.Errorf("x-retry-count %q accepted as canonical", raw)
		}
	}
	h = kafka.DecodeHeaders([]kgo.RecordHeader{{Key: evidence.HeaderRetryCount, Value: []byte("-1")}})
	if _, err := evidence.RetryCount(h); err == nil {
		t.Error("x-retry-count -1 accepted")
	}
	// A broken type list makes every header plain bytes, never a guess.
	h = kafka.DecodeHeaders([]kgo.RecordHeader{{Key: "n", Value: []byte("7")}, {Key: kafka.HeaderTypes, Value: []byte("{oops")}})
	if _, ok := h["n"].([]byte); !ok {
		t.Errorf("with a broken type list, n = %#v, want []byte", h["n"])
	}
	// A value that does not parse as its listed type stays bytes.
	h = kafka.DecodeHeaders([]kgo.RecordHeader{{Key: "n", Value: []byte("x")}, {Key: kafka.HeaderTypes, Value: []byte(`{"n":"i32"}`)}})
	if _, ok := h["n"].([]byte); !ok {
		t.Errorf("unparsable i32 = %#v, want []byte", h["n"])
	}
}

func TestTopicNames(t *testing.T) {
	if got := kafka.RetryTopic("orders.created", 1000); got != "orders.created.retry.1000ms" {
		t.Errorf("retry topic %q", got)
	}
	if q, ms, ok := kafka.ParseRetryTopic("orders.created.retry.1000ms"); !ok || q != "orders.created" || ms != 1000 {
		t.Errorf("parse: %q %d %v", q, ms, ok)
	}
	for _, bad := range []string{"orders.created", "orders.retry.xms", ".retry.5ms", "orders.retry.5"} {
		if _, _, ok := kafka.ParseRetryTopic(bad); ok {
			t.Errorf("%q parsed as a retry topic", bad)
		}
	}
	if kafka.DeadLetterTopic("o") != "o.dlt" || kafka.AttemptsTopic("o") != "o.attempts" || kafka.DefaultGroup("o") != "lily.o" {
		t.Error("names changed: they are a contract")
	}
	if got := kafka.ParseBrokers(" a:1, ,b:2 "); !reflect.DeepEqual(got, []string{"a:1", "b:2"}) {
		t.Errorf("brokers %q", got)
	}
}

// TestRetryCountTypeCodes: on Kafka the canonical x-retry-count is type
// code i32 (what Lily writes) or, from another producer, decimal text in
// 0..100. A record that lists another integer type code keeps that type and
// is not canonical, as on AMQP only the long-int is.
func TestRetryCountTypeCodes(t *testing.T) {
	rec := func(value, code string) transport.Headers {
		rh := []kgo.RecordHeader{{Key: evidence.HeaderRetryCount, Value: []byte(value)}}
		if code != "" {
			rh = append(rh, kgo.RecordHeader{Key: kafka.HeaderTypes, Value: []byte(`{"x-retry-count":"` + code + `"}`)})
		}
		return kafka.DecodeHeaders(rh)
	}
	for _, ok := range []struct{ value, code string }{{"2", "i32"}, {"2", ""}, {"0", ""}, {"100", "i32"}} {
		if n, err := evidence.RetryCount(rec(ok.value, ok.code)); err != nil || n != atoi(t, ok.value) {
			t.Errorf("x-retry-count %q code %q: %d, %v; want canonical", ok.value, ok.code, n, err)
		}
	}
	for _, bad := range []struct{ value, code, typ string }{
		{"2", "i8", "2 (int8"}, {"2", "i16", "2 (int16"}, {"2", "i64", "2 (int64"},
		{"2", "str", `"2" (string`}, {"2", "f64", "2 (float64"}, {"true", "bool", "true (bool"},
	} {
		h := rec(bad.value, bad.code)
		_, err := evidence.RetryCount(h)
		if !errors.Is(err, evidence.ErrInvalidRetryCount) || !strings.Contains(err.Error(), bad.typ) {
			t.Errorf("x-retry-count %q code %q: err %v, want invalid naming %q", bad.value, bad.code, err, bad.typ)
		}
	}
	// Foreign decimal text of the schema version becomes int32 too.
	h := kafka.DecodeHeaders([]kgo.RecordHeader{{Key: evidence.HeaderSchemaVersion, Value: []byte("4")}})
	if h[evidence.HeaderSchemaVersion] != int32(4) {
		t.Errorf("x-lily-schema-version %#v, want int32(4)", h[evidence.HeaderSchemaVersion])
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
