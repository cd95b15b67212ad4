package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport/kafka"
)

// kafkaBackend is the demo's Kafka: the cluster given with --brokers, or an
// in-process cluster (Emulators.Kafka) that lives as long as the demo's
// parent process and listens on a real TCP port, so that the worker child
// processes reach it like any cluster (the parent passes them --brokers).
type kafkaBackend struct {
	stop    func() // stops the in-process cluster; nil with --brokers
	brokers []string
	tr      *kafka.Transport
}

// openKafkaBackend connects to the brokers of conn ("host:port,..."), or
// starts an in-process cluster when there are none.
func openKafkaBackend(ctx context.Context, conn connection) (*kafkaBackend, error) {
	bs, err := brokers.ParseKafkaBrokers(conn.brokers)
	if err != nil {
		return nil, usagef("--brokers %q: %v", conn.brokers, err)
	}
	k := &kafkaBackend{brokers: bs}
	if len(bs) == 0 {
		bs, stop, err := conn.em.Kafka(ShareBrokerConfigs)
		if err != nil {
			return nil, fmt.Errorf("demo: start an in-process Kafka: %w", err)
		}
		k.stop, k.brokers = stop, bs
	}
	k.tr, err = brokers.OpenKafka(ctx, KafkaOptions(k.brokers))
	if err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// KafkaOptions are the demo's transport options. The worker is a
// static group member (its instance ID does not change across restarts),
// so that a restarted worker takes its partitions back at once instead of
// after the dead one's session timeout; heartbeats and metadata refreshes
// are frequent, for a demo that takes seconds.
func KafkaOptions(brokers []string) kafka.Options {
	return kafka.Options{
		Brokers: brokers, Partitions: 3, StaticMembership: true,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: 250 * time.Millisecond,
		RevokeTimeout: 2 * time.Second, ProduceTimeout: 10 * time.Second, MetadataMaxAge: 2 * time.Second,
	}
}

// where describes the cluster for the demo's first line.
func (k *kafkaBackend) where() string {
	if k.stop != nil {
		return "an in-process Kafka (kfake at " + strings.Join(k.brokers, ",") + "; --brokers host:port,... for your cluster)"
	}
	return "Kafka (" + strings.Join(k.brokers, ",") + ")"
}

// Close closes the client and stops the in-process cluster.
func (k *kafkaBackend) Close() {
	if k.tr != nil {
		k.tr.Close()
	}
	if k.stop != nil {
		k.stop()
	}
}
