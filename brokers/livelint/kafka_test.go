package livelint

import (
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/lint"
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

// TestKafkaShareLive judges delivery_limit against the cluster's limit and
// the lock against the assumed one; the live finding replaces the static.
func TestKafkaShareLive(t *testing.T) {
	cfg := parse(t, shareQueue+"delivery_limit = 5")
	ok := kafka.ShareSettings{DeliveryLimit: 6, DeliveryLimitSource: "broker", LockDuration: 30 * time.Second, LockDurationSource: "default"}
	live := map[string]kafka.ShareSettings{"orders.created": ok}
	fs := append(WithoutStaticShare(lint.Static(cfg), live), KafkaShare(cfg, live, ShareLockAssumed)...)
	if r := lint.NewReport(fs); r.Errors != 0 || r.Warnings != 0 {
		t.Errorf("limit 6, delivery_limit 5: %v", codes(r.Findings))
	}
	low := ok
	low.DeliveryLimit, low.LockDuration = 5, 10*time.Second
	live["orders.created"] = low
	got := codes(append(WithoutStaticShare(lint.Static(cfg), live), KafkaShare(cfg, live, ShareLockAssumed)...))
	if len(got) != 2 || got[0] != "error share-delivery-limit" || got[1] != "warning share-lock-short" {
		t.Errorf("limit 5, lock 10s: %v, want one error share-delivery-limit and one warning share-lock-short", got)
	}
	if fs := KafkaShare(cfg, live, 5*time.Second); len(fs) != 1 {
		t.Errorf("a lock of 10s against an assumed 5s: %v, want only the limit error", codes(fs))
	}
	if fs := KafkaShare(cfg, nil, 0); len(fs) != 0 {
		t.Errorf("queue not read from the cluster was judged: %v", codes(fs))
	}
}

// TestStaticShareNamesKafkaSettings: package lint names the share-group
// settings without linking the Kafka client; the names must be
// transport/kafka's, which reads them from the cluster.
func TestStaticShareNamesKafkaSettings(t *testing.T) {
	for _, f := range lint.Static(parse(t, shareQueue+"delivery_limit = 5")) {
		if f.Code != lint.CodeShareDeliveryLimit {
			continue
		}
		if !strings.Contains(f.What, "("+kafka.BrokerShareDeliveryLimit+")") ||
			!strings.Contains(f.Fix, "raise "+kafka.BrokerShareDeliveryLimit+" on the brokers (or "+kafka.GroupShareDeliveryLimit+" on share group workers)") {
			t.Errorf("static finding does not name kafka's settings %s and %s: %+v", kafka.BrokerShareDeliveryLimit, kafka.GroupShareDeliveryLimit, f)
		}
		return
	}
	t.Fatal("no static share-delivery-limit finding for delivery_limit = 5")
}
