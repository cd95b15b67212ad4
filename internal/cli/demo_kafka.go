package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport/kafka"
)

// demoKafka is the demo's Kafka: the cluster given with --brokers, or an
// in-process kfake cluster that lives as long as the demo's parent process
// and listens on a real TCP port, so that the worker child processes reach
// it like any cluster (the parent passes them --brokers).
type demoKafka struct {
	cluster *kfake.Cluster // nil with --brokers
	brokers []string
	tr      *kafka.Transport
}

// openDemoKafka connects to the brokers of arg ("host:port,..."), or starts
// an in-process kfake cluster when arg is empty.
func openDemoKafka(ctx context.Context, arg string) (*demoKafka, error) {
	bs, err := parseBrokersFlag(arg)
	if err != nil {
		return nil, err
	}
	k := &demoKafka{brokers: bs}
	if len(bs) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(demoShareBrokerConfigs))
		if err != nil {
			return nil, fmt.Errorf("demo: start an in-process Kafka (kfake): %w", err)
		}
		k.cluster, k.brokers = c, c.ListenAddrs()
	}
	k.tr, err = brokers.OpenKafka(ctx, demoKafkaOptions(k.brokers))
	if err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// demoKafkaOptions are the demo's transport options. The worker is a
// static group member (its instance ID does not change across restarts),
// so that a restarted worker takes its partitions back at once instead of
// after the dead one's session timeout; heartbeats and metadata refreshes
// are frequent, for a demo that takes seconds.
func demoKafkaOptions(brokers []string) kafka.Options {
	return kafka.Options{
		Brokers: brokers, Partitions: 3, StaticMembership: true,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: 250 * time.Millisecond,
		RevokeTimeout: 2 * time.Second, ProduceTimeout: 10 * time.Second, MetadataMaxAge: 2 * time.Second,
	}
}

// where describes the cluster for the demo's first line.
func (k *demoKafka) where() string {
	if k.cluster != nil {
		return "an in-process Kafka (kfake at " + strings.Join(k.brokers, ",") + "; --brokers host:port,... for your cluster)"
	}
	return "Kafka (" + strings.Join(k.brokers, ",") + ")"
}

// Close closes the client and stops the in-process cluster.
func (k *demoKafka) Close() {
	if k.tr != nil {
		k.tr.Close()
	}
	if k.cluster != nil {
		k.cluster.Close()
	}
}
