package evidence

import (
	"slices"
	"testing"
)

func TestHeaderNames(t *testing.T) {
	// The names are a wire contract (docs/design.md §7).
	want := map[string]string{
		HeaderEventID:         "x-lily-event-id",
		HeaderSchemaVersion:   "x-lily-schema-version",
		HeaderRetryCount:      "x-retry-count",
		HeaderRedriveCount:    "x-lily-redrive-count",
		HeaderReason:          "x-lily-dead-letter-reason",
		HeaderErrorType:       "x-lily-error-type",
		HeaderErrorMessage:    "x-lily-error-message",
		HeaderErrorStack:      "x-lily-error-stack",
		HeaderSource:          "x-lily-source",
		HeaderSourcePartition: "x-lily-source-partition",
		HeaderSourceOffset:    "x-lily-source-offset",
		HeaderSourceMessageID: "x-lily-source-message-id",
		HeaderDeliveryCount:   "x-lily-delivery-count",
		HeaderFirstFailureAt:  "x-lily-first-failure-at",
		HeaderLastFailureAt:   "x-lily-last-failure-at",
		HeaderDeadLetteredAt:  "x-lily-dead-lettered-at",
		HeaderConsumer:        "x-lily-consumer",
		HeaderConsumerVersion: "x-lily-consumer-version",
		HeaderHost:            "x-lily-host",
		HeaderTraceparent:     "traceparent",
		HeaderRawRetryCount:   "x-lily-raw-retry-count",
		HeaderHoldKey:         "x-lily-hold-key",
		HeaderHoldMode:        "x-lily-hold-mode",
		HeaderKey:             "x-lily-key",
		HeaderType:            "x-lily-type",
		HeaderAttempts:        "x-lily-attempts",
		HeaderDrill:           "x-lily-drill",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("header constant = %q, want %q", got, w)
		}
	}
	if len(want) != 27 {
		t.Errorf("duplicate header constants: %d distinct of 27", len(want))
	}
}

func TestEvidenceHeaders(t *testing.T) {
	hs := EvidenceHeaders()
	for _, own := range []string{HeaderEventID, HeaderSchemaVersion, HeaderRetryCount, HeaderRedriveCount, HeaderTraceparent, HeaderKey, HeaderType} {
		if slices.Contains(hs, own) {
			t.Errorf("EvidenceHeaders contains the message's own header %s", own)
		}
	}
	if !slices.Contains(hs, HeaderReason) || !slices.Contains(hs, HeaderRawRetryCount) {
		t.Errorf("EvidenceHeaders = %v, missing reason or raw retry count", hs)
	}
	hs[0] = "changed"
	if EvidenceHeaders()[0] == "changed" {
		t.Error("EvidenceHeaders returned shared storage")
	}
}

func TestReasons(t *testing.T) {
	want := []Reason{"permanent", "retries_exhausted", "delivery_limit", "invalid_retry_count",
		"expired", "maxlen", "unroutable", "parked", "rejected"}
	got := Reasons()
	if !slices.Equal(got, want) {
		t.Fatalf("Reasons() = %v, want %v", got, want)
	}
	for _, r := range got {
		if !r.Valid() {
			t.Errorf("%q.Valid() = false", r)
		}
		if r.String() != string(r) {
			t.Errorf("String() = %q", r.String())
		}
	}
	for _, r := range []Reason{"", "Permanent", "retry", "max_len", "delivery-limit"} {
		if r.Valid() {
			t.Errorf("%q.Valid() = true", r)
		}
	}
	got[0] = "x"
	if Reasons()[0] != ReasonPermanent {
		t.Error("Reasons returned shared storage")
	}
}
