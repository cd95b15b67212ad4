package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/brokers/livelint"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

func init() { register(newLintCmd) }

func newLintCmd() *cobra.Command {
	var (
		configPath, url, mgmtURL string
		live, strict, asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "lint",
		Short: "Find misconfigurations that lose or delay messages; exit 1 on errors (and warnings with --strict)",
		Long: `Judge a configuration, and with --live the RabbitMQ broker, for the mistakes
that lose or delay messages quietly. Each finding has a severity, the queue, a
stable code, what is wrong, why it loses or delays messages, and the fix.

Static: retry_attempts = 0 (no-retries); delivery_limit above 20 or equal to 1
(delivery-limit-high, delivery-limit-one); a retry span shorter than the queue's
expected_outage, with 'lily plan outage's figure (retry-span-short);
dlq_retention_hours not longer than source_retention_hours, or shorter than twice
triage_hours (dlq-retention-below-source, dlq-retention-below-triage); jitter
without retries, bucket counts near their limits, retries sharing the backoff cap
(jitter-without-retries, buckets-near-limit, topology-buckets-near-limit,
retries-share-cap); ordering = "park" (park-needs-keys); no owner (no-owner);
handler_timeout_millis + 1 s grace not inside RabbitMQ's consumer_timeout (30 min;
SQLite extends its leases) (handler-timeout-over-lease); on RabbitMQ,
buckets × bucket_max_length below expected_outage × expected_rate_per_second
(retry-capacity-short); breaker = true with retry_attempts = 0
(breaker-without-retries); a file without any [[queue]] (no-queues); a kafka
queue whose kafka_dlt_retention_hours is longer than dlq_retention_hours
(dlt-outlives-catalog); a kafka queue with kafka_share_group whose
delivery_limit is not below Kafka's default share-group delivery limit, 5: the
broker would archive a crash-type poison record silently before Lily
dead-letters it (share-delivery-limit).

--live, for queues with transport = "rabbitmq", through the management API: every
difference of 'lily topology verify' (topology-drift); a dead-letter exchange that
does not exist or routes the queue's dead-letter routing key nowhere (dlx-missing,
dlx-unbound); at-least-once dead-lettering without reject-publish; a quorum queue
with a delivery limit and no dead-letter exchange; a main queue without
x-delivery-limit; a dead-letter queue with a message TTL, from an argument or a
policy (dlq-message-ttl); a TTL without a dead-letter exchange; RabbitMQ 4.3's
changed delivery count (delivery-count-semantics); a main queue that is not quorum
(queue-not-quorum). Without the management API (the plugin is off on a fresh
broker) queue-not-quorum and a missing main queue are still found, through AMQP,
and the checks that need the API are named in one error (live-checks-not-run):
enabling the plugin runs them. For queues with transport =
"kafka", through the cluster (kafka_brokers): a dead-letter topic that keeps
records forever (retention.ms -1) or longer than dlq_retention_hours
(dlt-outlives-catalog); for a queue with kafka_share_group, a delivery_limit
not below the share group's delivery limit as the cluster has it (the group's
share.delivery.count.limit, else the brokers' group.share.delivery.count.limit,
else 5), naming where it came from (share-delivery-limit, replacing the static
finding), and an acquisition lock shorter than the 30 s Lily assumes
(share-lock-short).

--live, for queues with transport = "sqs": a missing queue or DLQ
(sqs-queue-missing); no redrive policy (sqs-no-redrive-policy); maxReceiveCount
at or below delivery_limit (sqs-max-receive-count-at-limit); a standard queue's
DLQ retention not longer than the queue's, since SQS counts a dead letter's age
from its first enqueue (sqs-dlq-retention-short); the queue's VisibilityTimeout
not longer than handler_timeout_millis (sqs-visibility-below-handler-timeout,
also checked statically against sqs_visibility_timeout_seconds).

--live, for queues with transport = "nats" and [[foreign_dlq]] kind =
"jetstream": a missing stream or consumer (nats-consumer-missing); a queue's
consumer with a MaxDeliver, which counts Lily's NakWithDelay retries
(nats-max-deliver-counts-retries); a dead-letter stream with work-queue
retention, which operators cannot peek (nats-dlq-workqueue); a foreign
consumer with MaxDeliver -1, which never sends MAX_DELIVERIES
(nats-max-deliver-unlimited), without its advisory stream
(nats-advisory-stream-missing), or with more BackOff steps than MaxDeliver
(nats-backoff-beyond-max-deliver).

Exit codes: 0 clean (warnings and infos allowed without --strict), 1 on errors
(and on warnings with --strict), 2 on bad flags.`,
		Example: `  lily lint --config lily.toml
  lily lint --config lily.toml --live --strict --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return usagef("lint: --config FILE is required: lint judges the [[queue]] entries of a configuration")
			}
			f := cmd.Flags()
			if !live && (f.Changed("url") || f.Changed("management-url")) {
				return usagef("lint: --url and --management-url only apply with --live")
			}
			cfg, err := config.LoadConfig(configPath)
			if err != nil {
				return err
			}
			findings := lint.Static(cfg)
			if live {
				lf, err := lintLive(cmd, cfg, url, mgmtURL)
				if err != nil {
					return err
				}
				kf, shares, err := lintLiveKafka(cmd, cfg) // lint_kafka.go
				if err != nil {
					return err
				}
				findings = livelint.WithoutStaticShare(findings, shares)
				findings = append(append(findings, lf...), kf...)
			}
			r := lint.NewReport(findings)
			out := cmd.OutOrStdout()
			if asJSON {
				err = report.JSON(out, r)
			} else {
				err = r.WriteText(out)
			}
			if err != nil {
				return err
			}
			if r.Failed(strict) {
				msg := fmt.Sprintf("lint: %d error(s)", r.Errors)
				if strict {
					msg += fmt.Sprintf(" and %d warning(s) (--strict)", r.Warnings)
				}
				return &ExitError{Code: 1, Msg: msg}
			}
			return nil
		},
	}
	f := cmd.Flags()
	configFlag(f, &configPath, "", "Lily configuration file (TOML) to judge (required)")
	f.BoolVar(&live, "live", false, "also judge the RabbitMQ broker of the queues with transport = \"rabbitmq\" (management API), the SQS queues of transport = \"sqs\", the storage account's Functions poison queues and the Kafka cluster of transport = \"kafka\" (kafka_brokers: dead-letter topics, share groups)")
	f.BoolVar(&strict, "strict", false, "exit 1 on warnings too")
	jsonFlag(f, &asJSON, `print {"findings":[...],"errors":N,"warnings":N,"infos":N}`)
	urlFlag(f, &url, "with --live: ")
	f.StringVar(&mgmtURL, "management-url", "", "with --live: management API URL (default: the broker's host, port 15672, same credentials)")
	return cmd
}

// lintLive runs the live checks against the configuration's broker. With no
// queue of transport "rabbitmq" it says so on stderr and checks nothing.
func lintLive(cmd *cobra.Command, cfg config.Config, url, mgmtURL string) ([]lint.Finding, error) {
	sqsFindings, hasSQS, err := lintLiveSQS(cmd.Context(), cfg)
	if err != nil {
		return nil, err
	}
	natsFindings, hasNATS, err := lintLiveNATS(cmd.Context(), cfg)
	if err != nil {
		return nil, err
	}
	azFindings, hasAz, err := lintLiveAzQueue(cmd.Context(), cfg)
	if err != nil {
		return nil, err
	}
	sqsFindings = append(append(sqsFindings, natsFindings...), azFindings...)
	hasSQS = hasSQS || hasNATS || hasAz
	if hasSQS && len(livelint.RabbitMQSpecs(cfg)) == 0 {
		return sqsFindings, nil
	}
	rf, err := lintLiveRabbit(cmd, cfg, url, mgmtURL)
	return append(rf, sqsFindings...), err
}

// lintLiveRabbit runs the live checks against the configuration's RabbitMQ.
func lintLiveRabbit(cmd *cobra.Command, cfg config.Config, url, mgmtURL string) ([]lint.Finding, error) {
	if url == "" {
		url = cfg.RabbitMQURL
	}
	m, err := rabbitmq.ManagementFor(url)
	if err != nil {
		return nil, usagef("lint: --url %q: %v", url, err)
	}
	if len(livelint.RabbitMQSpecs(cfg)) == 0 {
		if !hasKafkaQueue(cfg) {
			fmt.Fprintln(cmd.ErrOrStderr(), `lily: lint --live: no [[queue]] has transport = "rabbitmq" or "kafka"; only the static checks ran`)
		}
		return nil, nil
	}
	if mgmtURL != "" {
		m.URL = strings.TrimRight(mgmtURL, "/")
	}
	ctx := cmd.Context()
	// Without the management API (a fresh broker has the plugin off) the
	// queue type is still read through AMQP, and the checks that need the
	// API are reported as not run (live-checks-not-run), never passed.
	findings, err := livelint.RabbitMQLive(ctx, cfg, livelint.RabbitMQOptions{URL: url, Management: m})
	if err != nil {
		return nil, fmt.Errorf("lint --live: %w", err)
	}
	return findings, nil
}

// lintLiveNATS runs the live checks of the nats queues and the
// [[foreign_dlq]] kind = "jetstream" entries; has reports whether there
// were any.
func lintLiveNATS(ctx context.Context, cfg config.Config) (findings []lint.Finding, has bool, err error) {
	for _, q := range cfg.Queues {
		has = has || q.Transport == lily.TransportNATS
	}
	for _, f := range cfg.ForeignDLQs {
		has = has || f.Kind == config.ForeignJetStream
	}
	if !has {
		return nil, false, nil
	}
	b := brokers.New(cfg, brokers.Options{})
	defer b.Close()
	t, err := b.NATS(ctx)
	if err != nil {
		return nil, true, fmt.Errorf("lint --live: %w", err)
	}
	states, err := livelint.ReadNATS(ctx, cfg, t)
	if err != nil {
		return nil, true, fmt.Errorf("lint --live: nats: %w", err)
	}
	return livelint.CheckNATS(states), true, nil
}
