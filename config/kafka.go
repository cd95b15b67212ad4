package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"

	"github.com/lily-mq/lily"
)

// Defaults of the Kafka settings of Config.
const (
	DefaultKafkaBroker     = "127.0.0.1:9092"
	DefaultKafkaPartitions = 3
	MaxKafkaPartitions     = 10000
)

// kafkaTopicName is what Kafka accepts as a topic name.
var kafkaTopicName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// withKafkaDefaults fills the Kafka settings' defaults.
func (c Config) withKafkaDefaults() Config {
	if len(c.KafkaBrokers) == 0 {
		c.KafkaBrokers = []string{DefaultKafkaBroker}
	}
	c.KafkaPartitions = new(c.Partitions())
	return c
}

// Partitions returns kafka_partitions as written, or DefaultKafkaPartitions
// when it is unset.
func (c Config) Partitions() int32 {
	if c.KafkaPartitions == nil {
		return DefaultKafkaPartitions
	}
	return *c.KafkaPartitions
}

// validateKafka reports every problem of the Kafka settings, each naming
// the field, the value and the fix.
func (c Config) validateKafka() []error {
	var errs []error
	for _, b := range c.KafkaBrokers {
		if err := ValidateBroker(b); err != nil {
			errs = append(errs, fmt.Errorf("%w: kafka_brokers: %q: %v", ErrInvalidConfig, b, err))
		}
	}
	if n := c.Partitions(); n < 1 || n > MaxKafkaPartitions {
		errs = append(errs, fmt.Errorf("%w: kafka_partitions = %d: must be in 1..%d (partitions of a topic 'lily topology apply' creates)", ErrInvalidConfig, n, MaxKafkaPartitions))
	}
	for q, topic := range c.KafkaDeadLetterTopics {
		qc, ok := c.Queue(q)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w: kafka_dead_letter_topics: %q: no [[queue]] has this name (add one with transport = \"kafka\", or remove the entry)", ErrInvalidConfig, q))
		case qc.Transport != lily.TransportKafka:
			errs = append(errs, fmt.Errorf("%w: kafka_dead_letter_topics: %q: the queue's transport is %q; only a queue with transport = \"kafka\" has a dead-letter topic", ErrInvalidConfig, q, qc.Transport))
		}
		if !kafkaTopicName.MatchString(topic) {
			errs = append(errs, fmt.Errorf("%w: kafka_dead_letter_topics: %q = %q: a topic name must be 1..249 characters of letters, digits, '.', '_' or '-'", ErrInvalidConfig, q, topic))
		} else if topic == q {
			errs = append(errs, fmt.Errorf("%w: kafka_dead_letter_topics: %q = %q: the dead-letter topic must not be the queue's own topic", ErrInvalidConfig, q, topic))
		}
	}
	return append(errs, c.validateKafkaDLT()...)
}

// ValidateBroker checks a Kafka seed broker address: "host:port" with a
// port in 1..65535.
func ValidateBroker(b string) error {
	host, port, err := net.SplitHostPort(b)
	if err != nil {
		return fmt.Errorf(`must be "host:port", e.g. "kafka-1:9092" (%v)`, err)
	}
	if host == "" {
		return fmt.Errorf(`has no host: must be "host:port", e.g. "kafka-1:9092"`)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: must be a number in 1..65535", port)
	}
	return nil
}
