package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqs"
)

func init() { register(newTopologyCmd) }

// rabbitFlags find the configuration and the brokers.
type rabbitFlags struct {
	config  string
	url     string
	brokers string
}

func (f *rabbitFlags) add(cmd *cobra.Command) {
	configFlag(cmd.Flags(), &f.config, "", "Lily configuration file (TOML) with [[queue]] entries of transport \"rabbitmq\", \"kafka\" or \"sqs\" (required)")
	urlFlag(cmd.Flags(), &f.url, "")
	brokersFlag(cmd.Flags(), &f.brokers)
}

// topologyConfig is what a topology command works on: the broker queues of
// the configuration, by transport.
type topologyConfig struct {
	cfg    config.Config
	rabbit []transport.QueueSpec
	kafka  []transport.QueueSpec
	sqs    []transport.QueueSpec // topology_sqs.go
	pubsub []transport.QueueSpec
	nats   []transport.QueueSpec
	azq    []transport.QueueSpec // topology_azqueue.go
	url    string
}

// load returns the configuration, its RabbitMQ and Kafka queue specs and
// the AMQP URL.
func (f *rabbitFlags) load() (topologyConfig, error) {
	if f.config == "" {
		return topologyConfig{}, usagef("--config FILE is required: the topology is planned from the [[queue]] entries with transport = \"rabbitmq\" or \"kafka\"")
	}
	c, err := config.LoadConfig(f.config)
	if err != nil {
		return topologyConfig{}, err
	}
	if _, err := brokersFlagValue(f.brokers); err != nil {
		return topologyConfig{}, err
	}
	tc := topologyConfig{cfg: c, url: c.RabbitMQURL}
	for _, q := range c.Queues {
		switch q.Transport {
		case lily.TransportRabbitMQ:
			tc.rabbit = append(tc.rabbit, q.Spec())
		case lily.TransportKafka:
			tc.kafka = append(tc.kafka, q.Spec())
		case lily.TransportSQS:
			tc.sqs = append(tc.sqs, q.Spec())
		case lily.TransportPubSub:
			tc.pubsub = append(tc.pubsub, q.Spec())
		case lily.TransportNATS:
			tc.nats = append(tc.nats, q.Spec())
		case lily.TransportAzQueue:
			tc.azq = append(tc.azq, q.Spec())
		}
	}
	if len(tc.rabbit)+len(tc.kafka)+len(tc.sqs)+len(tc.pubsub)+len(tc.nats)+len(tc.azq) == 0 {
		return tc, usagef("--config %s: no [[queue]] has transport = \"rabbitmq\", \"kafka\", \"sqs\", \"pubsub\", \"nats\" or \"azqueue\"", f.config)
	}
	if f.url != "" {
		if err := config.ValidateRabbitMQURL(f.url); err != nil {
			return tc, usagef("--url: %v", err)
		}
		tc.url = f.url
	}
	return tc, nil
}

func newTopologyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Plan, declare and verify the RabbitMQ and Kafka topology of the configuration",
		Long: `The RabbitMQ topology of docs/design.md §6, from the [[queue]] entries with
transport = "rabbitmq": for exchange orders and queue orders.created, the quorum
queue (delivery limit, dead-lettering at-least-once to orders.dlx.v2,
reject-publish), the retry exchange orders.retry.v2 with one TTL bucket queue
per distinct delay (orders.created.retry.v2.1000ms ...) that returns messages
to orders.created only, and the dead-letter queue orders.created.dlq.v2.

The Kafka topics of the [[queue]] entries with transport = "kafka" (topic =
queue name): the topic, one retry topic per distinct delay
(orders.created.retry.1000ms ...), the dead-letter topic orders.created.dlt
(retention.ms -1: the catalog owns retention) and the compacted attempt
counter orders.created.attempts, all with kafka_partitions partitions (or the
existing topic's count), so that a copy keeps its partition number.

The NATS JetStream objects of the [[queue]] entries with transport = "nats"
(docs/design.md §8.8): the stream orders_created (subject orders.created,
nats_retention), its pull consumer lily (explicit acks, AckWait
nats_ack_wait_seconds, no MaxDeliver), the dead-letter stream
orders_created_dlq (subject lily.dlq.orders.created, limits retention) and
the shared retry stream LILY_RETRIES.

The Azure Storage queues of the [[queue]] entries with transport = "azqueue"
(docs/azqueue.md): the queue (orders-created for orders.created) and Lily's
dead-letter queue orders-created-dlq. A Functions poison queue is Azure's,
not Lily's: it is drained ([[foreign_dlq]]), never declared.`,
	}
	cmd.AddCommand(newTopologyPlanCmd(), newTopologyApplyCmd(), newTopologyVerifyCmd())
	return cmd
}

func newTopologyPlanCmd() *cobra.Command {
	var (
		f      rabbitFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Print every exchange, queue, argument, binding and topic that apply would declare (no broker needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, err := f.load()
			if err != nil {
				return err
			}
			top, err := rabbitmq.Plan(tc.rabbit)
			if err != nil {
				return err
			}
			topics := kafkaPlan(tc)
			sqsQueues, err := sqs.Plan(tc.sqs, tc.cfg.SQSVisibilityTimeout())
			if err != nil {
				return err
			}
			ps, err := pubsubPlan(tc)
			if err != nil {
				return err
			}
			azq, err := azqueue.Plan(tc.azq)
			if err != nil {
				return err
			}
			if asJSON {
				return report.JSON(cmd.OutOrStdout(), topologyJSON{Topology: top, KafkaTopics: topics, SQSQueues: sqsQueues, PubSub: ps, NATS: natsPlan(tc), AzQueues: azq})
			}
			if len(tc.azq) > 0 {
				defer printAzQueues(cmd.OutOrStdout(), azq)
			}
			if len(tc.nats) > 0 {
				defer printNATS(cmd.OutOrStdout(), natsPlan(tc))
			}
			if len(tc.pubsub) > 0 {
				defer printPubSub(cmd.OutOrStdout(), ps)
			}
			if len(tc.rabbit) > 0 {
				printTopology(cmd.OutOrStdout(), top)
			}
			if len(tc.kafka) > 0 {
				if len(tc.rabbit) > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				printKafkaTopics(cmd.OutOrStdout(), topics)
			}
			if len(tc.sqs) > 0 {
				if len(tc.rabbit)+len(tc.kafka) > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				printSQSQueues(cmd.OutOrStdout(), sqsQueues)
			}
			return nil
		},
	}
	f.add(cmd)
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}

func newTopologyApplyCmd() *cobra.Command {
	var f rabbitFlags
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Declare the topology on the brokers (idempotent; existing Kafka topics are left as they are)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, err := f.load()
			if err != nil {
				return err
			}
			if len(tc.rabbit) > 0 {
				tr, err := brokers.OpenRabbitMQ(cmd.Context(), rabbitmq.Options{URL: tc.url})
				if err != nil {
					return err
				}
				defer tr.Close()
				if err := tr.Declare(cmd.Context(), &transport.DeclareParams{Queues: tc.rabbit}); err != nil {
					return err
				}
				top, _ := rabbitmq.Plan(tc.rabbit)
				fmt.Fprintf(cmd.OutOrStdout(), "declared %d exchanges, %d queues, %d bindings\n", len(top.Exchanges), len(top.Queues), len(top.Bindings))
			}
			if len(tc.pubsub) > 0 {
				if err := applyPubSub(cmd, tc); err != nil {
					return err
				}
			}
			if len(tc.nats) > 0 {
				if err := applyNATS(cmd, tc); err != nil {
					return err
				}
			}
			if len(tc.azq) > 0 {
				if err := applyAzQueue(cmd, tc); err != nil {
					return err
				}
			}
			if len(tc.kafka) > 0 {
				if err := applyKafka(cmd, tc, f.brokers); err != nil {
					return err
				}
			}
			if len(tc.sqs) > 0 {
				return applySQS(cmd, tc)
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newTopologyVerifyCmd() *cobra.Command {
	var (
		f       rabbitFlags
		mgmtURL string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Report every missing or inequivalent exchange, queue, argument, binding and topic; exit 1 on any",
		Long: `Compare the planned topology with the live brokers: RabbitMQ through the
management plugin's HTTP API (AMQP cannot list arguments or bindings); Kafka
through the admin API (every topic exists, the main topic has
kafka_partitions partitions and the others as many as it, the dead-letter
topic keeps its records (retention.ms -1), the attempts topic is compacted).
Exits 1 when anything differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, err := f.load()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			res := verifyJSON{Differences: []rabbitmq.Difference{}}
			var summary []string
			if len(tc.rabbit) > 0 {
				top, err := rabbitmq.Plan(tc.rabbit)
				if err != nil {
					return err
				}
				m, err := rabbitmq.ManagementFor(tc.url)
				if err != nil {
					return usagef("--url: %v", err)
				}
				if mgmtURL != "" {
					m.URL = strings.TrimRight(mgmtURL, "/")
				}
				diffs, err := m.Verify(cmd.Context(), top)
				if err != nil {
					return err
				}
				res.Differences = append(res.Differences, diffs...)
				summary = append(summary, fmt.Sprintf("%d exchanges, %d queues, %d bindings", len(top.Exchanges), len(top.Queues), len(top.Bindings)))
			}
			if len(tc.kafka) > 0 {
				diffs, n, err := verifyKafka(cmd.Context(), tc, f.brokers)
				if err != nil {
					return err
				}
				res.KafkaDifferences = diffs
				summary = append(summary, fmt.Sprintf("%d Kafka topics", n))
			}
			if len(tc.sqs) > 0 {
				diffs, n, err := verifySQS(cmd.Context(), tc)
				if err != nil {
					return err
				}
				res.SQSDifferences = diffs
				summary = append(summary, fmt.Sprintf("%d SQS queues", n))
			}
			if len(tc.pubsub) > 0 {
				diffs, n, err := verifyPubSub(cmd.Context(), tc)
				if err != nil {
					return err
				}
				res.PubSubDifferences = diffs
				summary = append(summary, fmt.Sprintf("%d Pub/Sub topics with subscriptions", n))
			}
			if len(tc.nats) > 0 {
				diffs, n, err := verifyNATS(cmd.Context(), tc)
				if err != nil {
					return err
				}
				res.NATSDifferences = diffs
				summary = append(summary, fmt.Sprintf("%d NATS streams and consumers", n))
			}
			if len(tc.azq) > 0 {
				diffs, n, err := verifyAzQueue(cmd.Context(), tc)
				if err != nil {
					return err
				}
				res.AzQueueDifferences = diffs
				summary = append(summary, fmt.Sprintf("%d Azure Storage queues", n))
			}
			n := len(res.Differences) + len(res.KafkaDifferences) + len(res.SQSDifferences) + len(res.PubSubDifferences) + len(res.NATSDifferences) + len(res.AzQueueDifferences)
			res.OK = n == 0
			if asJSON {
				if err := report.JSON(out, res); err != nil {
					return err
				}
			} else {
				for _, d := range res.Differences {
					fmt.Fprintln(out, d.String())
				}
				for _, d := range res.KafkaDifferences {
					fmt.Fprintln(out, d.String())
				}
				for _, d := range res.SQSDifferences {
					fmt.Fprintln(out, d.String())
				}
				for _, d := range res.PubSubDifferences {
					fmt.Fprintln(out, d.String())
				}
				for _, d := range res.NATSDifferences {
					fmt.Fprintln(out, d.String())
				}
				for _, d := range res.AzQueueDifferences {
					fmt.Fprintln(out, d.String())
				}
			}
			if n > 0 {
				return &ExitError{Code: 1, Msg: fmt.Sprintf("topology verify: %d difference(s) from the plan; 'lily topology apply' declares what is missing (inequivalent queues must be deleted or migrated first)", n)}
			}
			if !asJSON {
				fmt.Fprintf(out, "topology OK: %s as planned\n", strings.Join(summary, "; "))
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&mgmtURL, "management-url", "", "management API URL (default: the broker's host, port 15672, same credentials)")
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}

// printTopology prints a topology as readable sections.
func printTopology(w io.Writer, top rabbitmq.Topology) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXCHANGE\tTYPE\tDURABLE")
	for _, e := range top.Exchanges {
		fmt.Fprintf(tw, "%s\t%s\t%t\n", e.Name, e.Type, e.Durable)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, q := range top.Queues {
		fmt.Fprintf(w, "QUEUE %s (%s)\n", q.Name, q.Role)
		keys := make([]string, 0, len(q.Arguments))
		for k := range q.Arguments {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := q.Arguments[k]
			if s, ok := v.(string); ok {
				v = fmt.Sprintf("%q", s)
			}
			fmt.Fprintf(w, "  %s = %v\n", k, v)
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BINDING EXCHANGE\tQUEUE\tROUTING KEY")
	for _, b := range top.Bindings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Exchange, b.Queue, b.RoutingKey)
	}
	tw.Flush()
}
