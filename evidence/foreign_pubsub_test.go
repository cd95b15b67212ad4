package evidence

import (
	"testing"
	"time"
)

func TestDecodeForeignPubSub(t *testing.T) {
	h := map[string]any{
		"CloudPubSubDeadLetterSourceSubscription":        "orders-worker",
		"CloudPubSubDeadLetterSourceSubscriptionProject": "shop",
		"CloudPubSubDeadLetterSourceTopicPublishTime":    "2026-11-30T10:00:00.123456Z",
		"CloudPubSubDeadLetterSourceDeliveryCount":       "7",
		"tenant": "acme",
	}
	fs := DecodeForeign(h)
	if len(fs) != 1 {
		t.Fatalf("decoded %d evidence entries, want 1: %+v", len(fs), fs)
	}
	f := fs[0]
	want := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	if f.System != SystemPubSub || f.Source != "orders-worker" || f.Count != 7 || !f.Time.Equal(want) || f.Reason != "max_delivery_attempts" {
		t.Errorf("decoded %+v", f)
	}
	if len(f.Raw) != 4 || f.Raw["CloudPubSubDeadLetterSourceSubscriptionProject"] != "shop" {
		t.Errorf("raw %v, want the four CloudPubSubDeadLetterSource* attributes", f.Raw)
	}
	if r, ok := BrokerReason(h); !ok || r != ReasonDeliveryLimit {
		t.Errorf("BrokerReason = %q, %v; want delivery_limit", r, ok)
	}
	// The fake forwards without attributes; the transport marks it.
	fs = DecodeForeign(map[string]any{HeaderPubSubForwardedBy: "dead_letter_policy"})
	if len(fs) != 1 || fs[0].Origin != HeaderPubSubForwardedBy || fs[0].Count != 0 {
		t.Errorf("forwarded-by marker decoded as %+v", fs)
	}
	if _, ok := BrokerReason(map[string]any{"tenant": "acme"}); ok {
		t.Error("BrokerReason found a reason in plain attributes")
	}
}
