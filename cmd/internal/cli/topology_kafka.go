package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqs"
)

// topologyJSON is the --json output of 'lily topology plan': the RabbitMQ
// topology's exchanges, queues and bindings, and the Kafka topics.
type topologyJSON struct {
	rabbitmq.Topology
	KafkaTopics []kafka.TopicPlan   `json:"kafka_topics,omitempty"`
	SQSQueues   []sqs.QueuePlan     `json:"sqs_queues,omitempty"`
	PubSub      []pubsub.Resource   `json:"pubsub,omitempty"`
	NATS        []nats.ObjectPlan   `json:"nats,omitempty"`
	AzQueues    []azqueue.QueuePlan `json:"azure_queues,omitempty"`
}

// verifyJSON is the --json output of 'lily topology verify'.
type verifyJSON struct {
	Differences        []rabbitmq.Difference `json:"differences"`
	KafkaDifferences   []kafka.Difference    `json:"kafka_differences,omitempty"`
	SQSDifferences     []sqs.Difference      `json:"sqs_differences,omitempty"`
	PubSubDifferences  []pubsub.Difference   `json:"pubsub_differences,omitempty"`
	NATSDifferences    []nats.Difference     `json:"nats_differences,omitempty"`
	AzQueueDifferences []azqueue.Difference  `json:"azure_queue_differences,omitempty"`
	OK                 bool                  `json:"ok"`
}

// kafkaPlan returns the topics of the configuration's kafka queues.
func kafkaPlan(tc topologyConfig) []kafka.TopicPlan {
	var out []kafka.TopicPlan
	for _, s := range tc.kafka {
		out = append(out, kafka.PlanRetention(s, tc.cfg.Partitions(), tc.cfg.KafkaDeadLetterTopics[s.Name], brokers.DLTRetention(tc.cfg, s.Name))...)
	}
	return out
}

// sortedPairs writes m as "k=v k=v", keys sorted.
func sortedPairs[V any](m map[string]V, str func(V) string) string {
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+str(m[k]))
	}
	return strings.Join(pairs, " ")
}

// printKafkaTopics prints planned topics as a table.
func printKafkaTopics(w io.Writer, topics []kafka.TopicPlan) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tROLE\tPARTITIONS\tCONFIGS")
	for _, tp := range topics {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", tp.Name, tp.Role, tp.Partitions, sortedPairs(tp.Configs, func(v *string) string { return *v }))
	}
	tw.Flush()
}

// openTopologyKafka connects to the cluster of the configuration's kafka
// queues (--brokers overriding kafka_brokers).
func openTopologyKafka(ctx context.Context, tc topologyConfig, brokersArg string) (*kafka.Transport, error) {
	b, err := openBrokers(tc.cfg, "", brokersArg)
	if err != nil {
		return nil, err
	}
	return b.Kafka(ctx)
}

// applyKafka creates the topics of the kafka queues that do not exist.
func applyKafka(cmd *cobra.Command, tc topologyConfig, brokersArg string) error {
	k, err := openTopologyKafka(cmd.Context(), tc, brokersArg)
	if err != nil {
		return err
	}
	defer k.Close()
	if err := k.Declare(cmd.Context(), &transport.DeclareParams{Queues: tc.kafka}); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "declared %d Kafka topics for %d queues (existing topics are left as they are, but for the dead-letter topics' retention; 'lily topology verify' compares them)\n",
		len(kafkaPlan(tc)), len(tc.kafka))
	return nil
}

// verifyKafka compares the kafka queues' topics with the cluster; it
// returns the differences and the number of topics planned.
func verifyKafka(ctx context.Context, tc topologyConfig, brokersArg string) ([]kafka.Difference, int, error) {
	k, err := openTopologyKafka(ctx, tc, brokersArg)
	if err != nil {
		return nil, 0, err
	}
	defer k.Close()
	diffs, err := k.Verify(ctx, tc.kafka, tc.cfg.Partitions())
	if err != nil {
		return nil, 0, err
	}
	if diffs == nil {
		diffs = []kafka.Difference{}
	}
	return diffs, len(kafkaPlan(tc)), nil
}
