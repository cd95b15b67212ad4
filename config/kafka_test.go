package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfigKafkaDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("[[queue]]\nname = \"orders\"\ntransport = \"kafka\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.KafkaBrokers) != 1 || c.KafkaBrokers[0] != DefaultKafkaBroker || c.Partitions() != DefaultKafkaPartitions || c.KafkaDeadLetterTopics != nil {
		t.Errorf("kafka defaults: brokers %v, partitions %d, dead-letter topics %v", c.KafkaBrokers, c.Partitions(), c.KafkaDeadLetterTopics)
	}
	c, err = ParseConfig([]byte(`kafka_brokers = ["kafka-1:9092", "[::1]:9093"]
kafka_partitions = 12
[kafka_dead_letter_topics]
orders = "orders-dlt"
[[queue]]
name = "orders"
transport = "kafka"
`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.KafkaBrokers, ",") != "kafka-1:9092,[::1]:9093" || c.Partitions() != 12 || c.KafkaDeadLetterTopics["orders"] != "orders-dlt" {
		t.Errorf("kafka settings %+v", c)
	}
}

// TestValidateKafka reports every bad Kafka setting at once, each naming
// the field, the value and the fix.
func TestValidateKafka(t *testing.T) {
	_, err := ParseConfig([]byte(`kafka_brokers = ["kafka-1", "kafka-2:port", ":9092", "kafka-3:70000"]
kafka_partitions = -1
[kafka_dead_letter_topics]
nope = "nope-dlt"
local = "local-dlt"
orders = "bad topic!"
events = "events"
[[queue]]
name = "local"
[[queue]]
name = "orders"
transport = "kafka"
[[queue]]
name = "events"
transport = "kafka"
`))
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{
		`kafka_brokers: "kafka-1": must be "host:port", e.g. "kafka-1:9092"`,
		`kafka_brokers: "kafka-2:port": port "port": must be a number in 1..65535`,
		`kafka_brokers: ":9092": has no host`,
		`kafka_brokers: "kafka-3:70000": port "70000"`,
		`kafka_partitions = -1: must be in 1..10000`,
		`kafka_dead_letter_topics: "nope": no [[queue]] has this name`,
		`kafka_dead_letter_topics: "local": the queue's transport is "sqlite"`,
		`kafka_dead_letter_topics: "orders" = "bad topic!": a topic name must be`,
		`kafka_dead_letter_topics: "events" = "events": the dead-letter topic must not be the queue's own topic`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
