package nats

import (
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TestHeadersRoundTrip: every header Lily writes comes back with its value
// and type — text as plain NATS headers, what NATS cannot carry (integers,
// bytes, line breaks, edge blanks, names with ':') through x-lily-headers
// — and a producer's Nats-* header travels renamed, so that the server
// does not act on it (Nats-Msg-Id would drop a give-back copy as a
// duplicate), and is read back under its own name.
func TestHeadersRoundTrip(t *testing.T) {
	h := transport.Headers{
		"tenant":                       "acme",
		"empty":                        "",
		"x-retry-count":                int32(2),
		"x-lily-attempts":              []byte{0, 1, 2},
		evidence.HeaderErrorStack:      "goroutine 1:\n\tmain.go:3",
		"padded":                       "  spaced  ",
		"odd:name":                     "v",
		"when":                         time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC),
		"Nats-Msg-Id":                  "producer-id",
		"many":                         []any{"a", "b"},
		evidence.HeaderPriorDeliveries: int32(3),
	}
	m := transport.Message{EventID: "e-1", Key: "k", Type: "order.created"}
	wire, err := encodeHeaders(m, h)
	if err != nil {
		t.Fatal(err)
	}
	if wire.Get("tenant") != "acme" || wire.Get(evidence.HeaderEventID) != "e-1" {
		t.Errorf("plain headers on the wire: %v", wire)
	}
	if _, ok := wire["Nats-Msg-Id"]; ok || wire.Get("x-lily-nats-Msg-Id") != "producer-id" {
		t.Errorf("Nats-Msg-Id went on the wire as is: %v", wire)
	}
	// Through the NATS wire format and back.
	raw := natsgo.NewMsg("s")
	raw.Header = wire
	dec := decodeHeaders(raw.Header)
	if dec.EventID != "e-1" || dec.Key != "k" || dec.Type != "order.created" {
		t.Errorf("identity %q %q %q", dec.EventID, dec.Key, dec.Type)
	}
	for k, v := range h {
		if fmt.Sprintf("%T %v", dec.Headers[k], dec.Headers[k]) != fmt.Sprintf("%T %v", v, v) {
			t.Errorf("header %s: got %T %v, want %T %v", k, dec.Headers[k], dec.Headers[k], v, v)
		}
	}
	if len(dec.Headers) != len(h) {
		t.Errorf("decoded %d headers, want %d: %v", len(dec.Headers), len(h), dec.Headers)
	}
}

// TestForeignTypedHeaderKept: an x-lily-headers value that is not Lily's
// typed JSON stays a plain header (nothing a producer sent is dropped).
func TestForeignTypedHeaderKept(t *testing.T) {
	dec := decodeHeaders(natsgo.Header{HeaderTyped: {"not json"}, "a": {"1", "2"}})
	if dec.Headers[HeaderTyped] != "not json" {
		t.Errorf("foreign %s: %v", HeaderTyped, dec.Headers)
	}
	if fmt.Sprint(dec.Headers["a"]) != "[1 2]" {
		t.Errorf("multi-valued header: %#v", dec.Headers["a"])
	}
}
