package pubsub

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TestAttributesRoundTrip: strings that fit are plain attributes, as sent;
// every other value is packed in chunks of at most 1024 bytes and comes
// back with its Go type.
func TestAttributesRoundTrip(t *testing.T) {
	h := transport.Headers{
		"tenant":                  "acme",
		evidence.HeaderRetryCount: int32(2),
		"flag":                    true,
		"raw":                     []byte{0xff, 0x00},
		"decimal":                 transport.Decimal{Scale: 2, Value: 1234},
		"zero-string":             "0",
		evidence.HeaderErrorStack: strings.Repeat("goroutine 1 [running]:\n", 200), // > 1024 bytes
		strings.Repeat("k", 300):  "long name",
		"googclient_x":            "reserved prefix",
		"x-lily-packed.000":       "a foreign attribute named like a chunk",
	}
	attrs, err := EncodeAttributes(h, map[string]string{AttrDueAt: "123"})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range attrs {
		if len(k) > MaxAttributeKey || len(v) > MaxAttributeValue || strings.HasPrefix(k, "goog") {
			t.Errorf("attribute %q (%d bytes) breaks the service's limits", k[:min(len(k), 40)], len(v))
		}
	}
	if attrs["tenant"] != "acme" || attrs["zero-string"] != "0" {
		t.Errorf("plain strings changed: %v", attrs)
	}
	got, internal := DecodeAttributes(attrs)
	if internal[AttrDueAt] != "123" {
		t.Errorf("internal attributes %v", internal)
	}
	if !reflect.DeepEqual(got, h) {
		for k := range h {
			if !reflect.DeepEqual(got[k], h[k]) {
				t.Errorf("header %q: got %#v, want %#v", k[:min(len(k), 40)], got[k], h[k])
			}
		}
		if len(got) != len(h) {
			t.Errorf("%d headers back, want %d", len(got), len(h))
		}
	}
}

// TestAttributeLimits: more than 100 attributes is refused; a dead-letter
// copy gives up Lily's evidence (never the producer's attributes) to fit.
func TestAttributeLimits(t *testing.T) {
	h := transport.Headers{}
	for i := 0; i < 101; i++ {
		h["a"+strings.Repeat("x", i)] = "v"
	}
	if _, err := EncodeAttributes(h, nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("101 attributes: err %v, want ErrLimit", err)
	}
	// A foreign message with 95 attributes of 1000 bytes: the evidence
	// (stack, message, history) must shrink to fit the remaining five.
	orig := transport.Headers{}
	for i := 0; i < 95; i++ {
		orig["attr-"+strings.Repeat("y", i)] = strings.Repeat("z", 1000)
	}
	d := &transport.Delivery{Message: transport.Message{EventID: "m1", Body: []byte("b"), Headers: orig}}
	dl := transport.CloneHeaders(orig)
	dl[evidence.HeaderReason] = "permanent"
	dl[evidence.HeaderErrorMessage] = strings.Repeat("e", 1000)
	dl[evidence.HeaderErrorStack] = strings.Repeat("s", 4000)
	dl[evidence.HeaderHost] = "h"
	dl[evidence.HeaderConsumerVersion] = "v1"
	dl[evidence.HeaderFirstFailureAt] = "2026-12-01T00:00:00.000Z"
	dl[evidence.HeaderDeliveryCount] = int32(1)
	pm, err := fitEvidence(d, dl)
	if err != nil {
		t.Fatal(err)
	}
	if len(pm.Attributes) > MaxAttributes {
		t.Fatalf("%d attributes", len(pm.Attributes))
	}
	for k, v := range orig {
		if pm.Attributes[k] != v {
			t.Fatalf("producer attribute %s changed", k)
		}
	}
	back, _ := DecodeAttributes(pm.Attributes)
	if back[evidence.HeaderReason] != "permanent" || back[HeaderEvidenceTrimmed] != "true" || back[evidence.HeaderEventID] != "m1" {
		t.Errorf("reason %v trimmed %v event %v", back[evidence.HeaderReason], back[HeaderEvidenceTrimmed], back[evidence.HeaderEventID])
	}
}

// TestEncodeAttributesDropsTheLedgerMark: a message at Pub/Sub's attribute
// limit is not refused because the ledger marked it counted
// (transport.HeaderCounted): the mark is dropped, the producer's
// attributes kept; one over the limit without it is still refused.
func TestEncodeAttributesDropsTheLedgerMark(t *testing.T) {
	h := transport.Headers{transport.HeaderCounted: "1"}
	for i := range MaxAttributes {
		h[fmt.Sprintf("a%03d", i)] = "v"
	}
	attrs, err := EncodeAttributes(h, nil)
	if err != nil {
		t.Fatalf("%d producer attributes and the mark: %v, want the mark dropped", MaxAttributes, err)
	}
	if _, ok := attrs[transport.HeaderCounted]; ok || len(attrs) != MaxAttributes {
		t.Errorf("%d attributes, mark kept: %v; want the %d producer attributes alone", len(attrs), ok, MaxAttributes)
	}
	if _, ok := h[transport.HeaderCounted]; !ok {
		t.Error("the caller's headers lost the mark")
	}
	h["one-too-many"] = "v"
	if _, err := EncodeAttributes(h, nil); !errors.Is(err, ErrLimit) {
		t.Errorf("%d producer attributes: %v, want ErrLimit", MaxAttributes+1, err)
	}
}
