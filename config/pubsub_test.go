package config

import (
	"errors"
	"strings"
	"testing"
)

func TestPubSubSettings(t *testing.T) {
	c, err := ParseConfig([]byte(`pubsub_project = "p"
[[queue]]
name = "orders"
transport = "pubsub"
delivery_limit = 8
[pubsub_queues.orders]
topic = "orders-events"
subscription = "orders-worker"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.PubSubAckDeadline() != 60 || c.PubSubMaxAttempts(8) != 10 || c.PubSubMaxAttempts(1) != 5 ||
		c.PubSubQueues["orders"].Subscription != "orders-worker" {
		t.Errorf("defaults: ack %d, attempts %d/%d, names %+v", c.PubSubAckDeadline(), c.PubSubMaxAttempts(8), c.PubSubMaxAttempts(1), c.PubSubQueues)
	}
	_, err = ParseConfig([]byte(`pubsub_ack_deadline_seconds = 5
pubsub_max_delivery_attempts = 6
[[queue]]
name = "orders"
transport = "pubsub"
delivery_limit = 6
[[queue]]
name = "local"
[pubsub_queues.local]
topic = "1bad"
[pubsub_queues.ghost]
topic = "ghost"
`))
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("ParseConfig accepted bad Pub/Sub settings: %v", err)
	}
	for _, want := range []string{"pubsub_project is empty", "pubsub_ack_deadline_seconds = 5", "delivery_limit = 6 with pubsub_max_delivery_attempts 6",
		`pubsub_queues: "local": the queue's transport is "sqlite"`, `topic = "1bad"`, `pubsub_queues: "ghost": no [[queue]]`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
