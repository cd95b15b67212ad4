package config_test

import (
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// TestExampleConfig keeps examples/lily.toml, which the README points to,
// valid and meaning what its comments say.
func TestExampleConfig(t *testing.T) {
	c, err := config.LoadConfig("../examples/lily.toml")
	if err != nil {
		t.Fatal(err)
	}
	q, ok := c.Queue("orders.created")
	if !ok {
		t.Fatal("orders.created missing")
	}
	if got := q.Policy().Buckets(); len(got) != 3 || got[0] != 1000 || got[1] != 2000 || got[2] != 4000 {
		t.Errorf("orders.created buckets %v, want [1000 2000 4000]", got)
	}
	if q.Exchange != "orders" || q.Settings().DeliveryLimit != 5 || q.Owner != "team-checkout" {
		t.Errorf("orders.created %+v", q)
	}
	p, _ := c.Queue("payments.captured")
	if p.Transport != lily.TransportSQLite || p.Settings().MaxRedrives != 2 || p.Ordering != lily.OrderingReorder {
		t.Errorf("payments.captured defaults %+v", p)
	}
}

// TestExampleKafkaConfig keeps examples/lily-kafka.toml, which the README
// points to, valid and meaning what its comments say.
func TestExampleKafkaConfig(t *testing.T) {
	c, err := config.LoadConfig("../examples/lily-kafka.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.KafkaBrokers) != 1 || c.KafkaBrokers[0] != "127.0.0.1:9092" || c.Partitions() != 3 {
		t.Errorf("brokers %v, partitions %d", c.KafkaBrokers, c.Partitions())
	}
	q, ok := c.Queue("orders.created")
	if !ok || q.Transport != lily.TransportKafka || q.Settings().DeliveryLimit != 5 {
		t.Fatalf("orders.created %+v", q)
	}
	if got := q.Policy().Buckets(); len(got) != 3 || got[0] != 1000 || got[1] != 2000 || got[2] != 4000 {
		t.Errorf("orders.created buckets %v, want [1000 2000 4000]", got)
	}
	if c.KafkaDeadLetterTopics["billing"] != "billing.DLT" {
		t.Errorf("dead-letter topics %v", c.KafkaDeadLetterTopics)
	}
}

// TestExampleKafkaShareConfig keeps examples/lily-kafka-share.toml, which
// the README points to, valid and meaning what its comments say: a share
// group's default delivery_limit, below the broker's default archive limit.
func TestExampleKafkaShareConfig(t *testing.T) {
	c, err := config.LoadConfig("../examples/lily-kafka-share.toml")
	if err != nil {
		t.Fatal(err)
	}
	q, ok := c.Queue("orders.created")
	if !ok || q.Transport != lily.TransportKafka || q.KafkaShareGroup != "orders-workers" || q.Ordering != lily.OrderingReorder {
		t.Fatalf("orders.created %+v", q)
	}
	if dl := q.Settings().DeliveryLimit; dl != lily.ShareGroupDeliveryLimit || dl >= lily.DefaultBrokerShareDeliveryLimit {
		t.Errorf("delivery_limit %d, want %d (below %d)", dl, lily.ShareGroupDeliveryLimit, lily.DefaultBrokerShareDeliveryLimit)
	}
	if got := q.Policy().Buckets(); len(got) != 3 || got[0] != 1000 || got[1] != 2000 || got[2] != 4000 {
		t.Errorf("orders.created buckets %v, want [1000 2000 4000]", got)
	}
}

// TestExampleSQSConfig keeps examples/lily-sqs.toml, which the README
// points to, valid.
func TestExampleSQSConfig(t *testing.T) {
	c, err := config.LoadConfig("../examples/lily-sqs.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Queues) != 2 || c.SQSRegion != "eu-west-1" || c.Queues[0].Transport != "sqs" {
		t.Errorf("unexpected example configuration: %+v", c)
	}
}
