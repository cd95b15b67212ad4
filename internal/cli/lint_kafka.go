package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/kafka"
)

// hasKafkaQueue reports whether cfg has a queue with transport "kafka".
func hasKafkaQueue(cfg config.Config) bool {
	for _, q := range cfg.Queues {
		if q.Transport == lily.TransportKafka {
			return true
		}
	}
	return false
}

// lintLiveKafka reads the dead-letter topics of the kafka queues on the
// configuration's cluster (kafka_brokers) and judges their retention, and
// reads the share-group settings (delivery limit, lock) of the queues with
// kafka_share_group and judges them. It returns the share-group settings
// it read, by queue: those queues' static share-delivery-limit findings
// (judged against Kafka's default) give way to the live ones.
func lintLiveKafka(cmd *cobra.Command, cfg config.Config) ([]lint.Finding, map[string]kafka.ShareSettings, error) {
	if !hasKafkaQueue(cfg) {
		return nil, nil, nil
	}
	b := brokers.New(cfg, brokers.Options{})
	defer b.Close()
	ctx := cmd.Context()
	k, err := b.Kafka(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("lint --live: %w", err)
	}
	topics, configs := map[string]string{}, map[string]map[string]string{}
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportKafka {
			continue
		}
		topics[q.Name] = k.DeadLetterTopicOf(q.Name)
		tc, err := k.TopicConfigs(ctx, topics[q.Name])
		if err != nil {
			// A missing topic is 'lily topology verify's to report.
			fmt.Fprintf(cmd.ErrOrStderr(), "lily: lint --live: %s: %v (not judged)\n", topics[q.Name], err)
			continue
		}
		configs[q.Name] = tc
	}
	shares := map[string]kafka.ShareSettings{}
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportKafka || q.KafkaShareGroup == "" {
			continue
		}
		s, err := k.ShareSettings(ctx, q.KafkaShareGroup)
		if err != nil {
			// The static finding (Kafka's default limit) stands.
			fmt.Fprintf(cmd.ErrOrStderr(), "lily: lint --live: share group %s of %s: %v (judged against Kafka's default limit only)\n", q.KafkaShareGroup, q.Name, err)
			continue
		}
		shares[q.Name] = s
	}
	out := lint.KafkaDLTLive(cfg, topics, configs)
	return append(out, lint.KafkaShareLive(cfg, shares, lint.ShareLockAssumed)...), shares, nil
}
