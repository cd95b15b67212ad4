package brokers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/kafka"
)

// KafkaConnectTimeout bounds how long OpenKafka waits for a Kafka broker.
const KafkaConnectTimeout = 10 * time.Second

// OpenKafka connects to a Kafka cluster, failing after
// KafkaConnectTimeout; without o.Logger the client's own log is kept
// quiet.
func OpenKafka(ctx context.Context, o kafka.Options) (*kafka.Transport, error) {
	ctx, cancel := context.WithTimeout(ctx, KafkaConnectTimeout)
	defer cancel()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tr, err := kafka.Open(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka (check --brokers or the config's kafka_brokers): %w", err)
	}
	return tr, nil
}

// ParseKafkaBrokers parses a seed list, "host:port,host:port"; blank
// means none. An error names the entry that is not a host:port and why.
func ParseKafkaBrokers(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	bs := kafka.ParseBrokers(s)
	for _, b := range bs {
		if err := config.ValidateBroker(b); err != nil {
			return nil, fmt.Errorf("%q %w", b, err)
		}
	}
	return bs, nil
}

// KafkaOptions are the transport options of a configuration's kafka
// queues: kafka_brokers, partitions, the dead-letter topics and their
// retention.
func KafkaOptions(cfg config.Config) kafka.Options {
	return kafka.Options{Brokers: cfg.KafkaBrokers, Partitions: cfg.Partitions(),
		DeadLetterTopics: cfg.KafkaDeadLetterTopics, DeadLetterRetention: DLTRetentions(cfg)}
}

// Kafka returns the set's Kafka transport, connecting on first use.
func (s *Set) Kafka(ctx context.Context) (*kafka.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kfk == nil {
		o := KafkaOptions(s.cfg)
		o.Brokers = s.kafkaBrokers
		k, err := OpenKafka(ctx, o)
		if err != nil {
			return nil, err
		}
		s.kfk = k
	}
	return s.kfk, nil
}

// DLTRetention is the dead-letter topic retention of a kafka queue as the
// configuration says (config.Config.KafkaDLTRetention).
func DLTRetention(cfg config.Config, queue string) kafka.DLTRetention {
	h, b := cfg.KafkaDLTRetention(queue)
	return kafka.DLTRetention{Millis: int64(h) * 3600 * 1000, Bytes: b}
}

// DLTRetentions is DLTRetention of every kafka queue of cfg, for
// kafka.Options.DeadLetterRetention.
func DLTRetentions(cfg config.Config) map[string]kafka.DLTRetention {
	out := map[string]kafka.DLTRetention{}
	for _, q := range cfg.Queues {
		if q.Transport == lily.TransportKafka {
			out[q.Name] = DLTRetention(cfg, q.Name)
		}
	}
	return out
}
