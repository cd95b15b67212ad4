package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/brokers/livelint"
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
// (judged against Kafka's default) give way to the live ones. What cannot
// be read is said on stderr and not judged.
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
	st := livelint.ReadKafka(ctx, cfg, k)
	for _, n := range st.Notes {
		fmt.Fprintf(cmd.ErrOrStderr(), "lily: lint --live: %s\n", n)
	}
	return livelint.CheckKafka(cfg, st, livelint.ShareLockAssumed), st.Shares, nil
}
