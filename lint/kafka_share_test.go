package lint

import (
	"testing"
	"time"

	"github.com/lily-mq/lily/transport/kafka"
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

// TestKafkaShareLive judges delivery_limit against the cluster's limit and
// the lock against the assumed one; the live finding replaces the static.
func TestKafkaShareLive(t *testing.T) {
	cfg := parse(t, shareQueue+"delivery_limit = 5")
	ok := kafka.ShareSettings{DeliveryLimit: 6, DeliveryLimitSource: "broker", LockDuration: 30 * time.Second, LockDurationSource: "default"}
	live := map[string]kafka.ShareSettings{"orders.created": ok}
	fs := append(WithoutStaticShare(Static(cfg), live), KafkaShareLive(cfg, live, ShareLockAssumed)...)
	if r := NewReport(fs); r.Errors != 0 || r.Warnings != 0 {
		t.Errorf("limit 6, delivery_limit 5: %v", codes(r.Findings))
	}
	low := ok
	low.DeliveryLimit, low.LockDuration = 5, 10*time.Second
	live["orders.created"] = low
	got := codes(append(WithoutStaticShare(Static(cfg), live), KafkaShareLive(cfg, live, ShareLockAssumed)...))
	if len(got) != 2 || got[0] != "error share-delivery-limit" || got[1] != "warning share-lock-short" {
		t.Errorf("limit 5, lock 10s: %v, want one error share-delivery-limit and one warning share-lock-short", got)
	}
	if fs := KafkaShareLive(cfg, live, 5*time.Second); len(fs) != 1 {
		t.Errorf("a lock of 10s against an assumed 5s: %v, want only the limit error", codes(fs))
	}
	if fs := KafkaShareLive(cfg, nil, 0); len(fs) != 0 {
		t.Errorf("queue not read from the cluster was judged: %v", codes(fs))
	}
}
