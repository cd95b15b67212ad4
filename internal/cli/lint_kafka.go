package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
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
// configuration's cluster (kafka_brokers) and judges their retention.
func lintLiveKafka(cmd *cobra.Command, cfg config.Config) ([]lint.Finding, error) {
	if !hasKafkaQueue(cfg) {
		return nil, nil
	}
	b, err := newBrokers(cfg, "", "")
	if err != nil {
		return nil, err
	}
	defer b.Close()
	ctx := cmd.Context()
	k, err := b.kafka(ctx)
	if err != nil {
		return nil, fmt.Errorf("lint --live: %w", err)
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
	return lint.KafkaDLTLive(cfg, topics, configs), nil
}
