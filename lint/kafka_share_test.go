package lint

import (
	"testing"
)

// shareQueue is a kafka queue consumed by share group "workers".
const shareQueue = `
kafka_brokers = ["127.0.0.1:9092"]
[[queue]]
name = "orders.created"
transport = "kafka"
kafka_share_group = "workers"
owner = "orders"
retry_attempts = 3
`

// TestKafkaShareStatic: a share-group queue's delivery_limit must be below
// Kafka's default archive limit (5); a consumer-group queue is not judged.
func TestKafkaShareStatic(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        bool
	}{
		{"default 4", "", false},
		{"4", "delivery_limit = 4", false},
		{"5", "delivery_limit = 5", true},
		{"9", "delivery_limit = 9", true},
	} {
		r := NewReport(Static(parse(t, shareQueue+tc.extra)))
		if got := r.Has(CodeShareDeliveryLimit, "orders.created"); got != tc.want {
			t.Errorf("%s: share-delivery-limit %v, want %v: %v", tc.name, got, tc.want, codes(r.Findings))
		}
	}
	plain := `
[[queue]]
name = "orders.created"
transport = "kafka"
owner = "orders"
retry_attempts = 3
delivery_limit = 5
`
	if r := NewReport(Static(parse(t, plain))); r.Has(CodeShareDeliveryLimit, "orders.created") {
		t.Errorf("consumer-group queue judged as a share group: %v", codes(r.Findings))
	}
}
