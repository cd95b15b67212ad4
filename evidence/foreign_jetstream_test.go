package evidence

import (
	"testing"
	"time"
)

// TestJetStreamAdvisoryEvidence: the advisory headers a JetStream ingest
// writes decode as foreign evidence of system jetstream (source
// stream/consumer, deliveries as the count, stream sequence as the
// offset, the advisory's time), MaxDeliver maps to delivery_limit and a
// termination to rejected, and a removed message says so.
func TestJetStreamAdvisoryEvidence(t *testing.T) {
	h := map[string]any{
		HeaderJetStreamAdvisory:   JetStreamMaxDeliveries,
		HeaderJetStreamStream:     "ORDERS",
		HeaderJetStreamConsumer:   "billing",
		HeaderJetStreamSequence:   "42",
		HeaderJetStreamDeliveries: "5",
		HeaderJetStreamTime:       "2026-12-06T10:00:00.5Z",
	}
	fs := DecodeForeign(h)
	if len(fs) != 1 {
		t.Fatalf("decoded %d foreign evidences, want 1: %+v", len(fs), fs)
	}
	f := fs[0]
	if f.System != SystemJetStream || f.Source != "ORDERS/billing" || f.Count != 5 || !f.HasOffset || f.Offset != 42 ||
		f.Reason != JetStreamMaxDeliveries || !f.Time.Equal(time.Date(2026, 12, 6, 10, 0, 0, 500000000, time.UTC)) {
		t.Errorf("decoded %+v", f)
	}
	if r, ok := BrokerReason(h); !ok || r != ReasonDeliveryLimit {
		t.Errorf("reason of MAX_DELIVERIES: %s %v, want delivery_limit", r, ok)
	}
	h[HeaderJetStreamAdvisory] = JetStreamTerminated
	h[HeaderJetStreamRemoved] = "true"
	if r, ok := BrokerReason(h); !ok || r != ReasonRejected {
		t.Errorf("reason of MSG_TERMINATED: %s %v, want rejected", r, ok)
	}
	if f := DecodeForeign(h)[0]; f.Message == "" {
		t.Errorf("a removed message's evidence does not say so: %+v", f)
	}
	if _, ok := BrokerReason(map[string]any{"tenant": "acme"}); ok {
		t.Error("a reason from headers without evidence")
	}
}
