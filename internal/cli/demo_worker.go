package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

func init() { register(newDemoWorkerCmd) }

// demoQueueConfig is the demo queue's configuration: three retries tens of
// milliseconds apart, the default delivery limit of 5.
func demoQueueConfig(name, kind string) lily.QueueConfig {
	return lily.QueueConfig{
		Name:                  name,
		Transport:             kind,
		RetryAttempts:         3,
		RetryBackoffMillis:    new(int64(20)),
		MaxRetryBackoffMillis: new(int64(80)),
		RetryJitterRatio:      0.2,
		DeliveryLimit:         new(5),
		HandlerTimeoutMillis:  new(int64(5000)),
		Owner:                 "team-checkout",
		// The demo is about poison, not outages: near its end only the
		// failing orders are left, and a breaker would (rightly) read that
		// as a failing dependency and pause. The outage scenario turns it on.
		Breaker: new(bool),
	}.WithDefaults()
}

// demoVisibility is the demo's lease length. The supervisor gives a dead
// worker's leases back at once (RecoverLeases), so this is only the
// fallback if the supervisor itself dies.
const demoVisibility = 10 * time.Second

// newDemoWorkerCmd is the demo's worker process: it consumes the demo
// queue until nothing is left in flight, then exits 0. The demo runs it as
// a child process and restarts it whenever it dies.
func newDemoWorkerCmd() *cobra.Command {
	var (
		db, instance, kind, url, queue string
		shopDB                         string
		brokers, psEndpoint, psCount   string
		shareGroup                     string
		verbose, fixed, sqsQuery       bool
	)
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  "The demo's worker process (started by 'lily demo')",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			qc := demoShareQueueConfig(queue, kind, shareGroup)
			if kind == lily.TransportPubSub && psEndpoint == "" {
				return usagef("demo-worker --transport pubsub needs --pubsub-endpoint and --pubsub-count (the demo passes its fake's)")
			}
			b, err := openDemoBackend(ctx, demoConn{kind: kind, url: url, brokers: brokers, sqsQuery: sqsQuery, pubsubEndpoint: psEndpoint, pubsubCount: psCount}, db, qc)
			if err != nil {
				return err
			}
			defer b.Close()
			var logOut io.Writer = io.Discard
			if verbose {
				logOut = cmd.ErrOrStderr()
			}
			handler, version := demoHandler, "1.4.2"
			if fixed { // the second half of the demo: the bugs are fixed
				handler, version = demoHandlerFixed, demoFixedVersion
			}
			if shopDB != "" { // the order is recorded through the inbox (demo_inbox.go)
				shop, err := openDemoShop(ctx, shopDB)
				if err != nil {
					return err
				}
				defer shop.Close()
				handler = demoShopHandler(shop, fixed)
			}
			c, err := lily.NewConsumer(b.tr, lily.HandlerFunc(handler), lily.ConsumerOptions{
				Queue: qc, Concurrency: 4, Prefetch: 64, Instance: instance,
				Name: "orders-consumer", Version: version, ReceiveWait: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(logOut, nil)),
			})
			if err != nil {
				return err
			}
			// Quiet: nothing left in flight (ready, leased or waiting to
			// be retried) — every message is acked or dead-lettered — for
			// longer than the longest retry delay (stopWhenIdle, consume.go).
			go stopWhenIdle(ctx, cancel, b.counter(), qc, 200*time.Millisecond)
			return c.Run(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&db, "db", "", "database file (store or catalog)")
	fl.StringVar(&instance, "instance", "demo-worker-"+strconv.Itoa(os.Getpid()), "consumer instance ID (its leases)")
	fl.StringVar(&kind, "transport", lily.TransportSQLite, "sqlite, rabbitmq, kafka, sqs or pubsub")
	fl.StringVar(&url, "url", config.DefaultRabbitMQURL, "AMQP URL")
	fl.StringVar(&brokers, "brokers", "", "Kafka seed brokers (the demo passes its cluster's)")
	fl.StringVar(&shareGroup, "share-group", "", "consume the Kafka queue through this share group (the demo passes its own)")
	fl.BoolVar(&sqsQuery, "sqs-query", false, "the SQS endpoint (--url) speaks the Query protocol (the demo's emulator)")
	fl.StringVar(&psEndpoint, "pubsub-endpoint", "", "the demo's Pub/Sub fake (the demo passes its own)")
	fl.StringVar(&psCount, "pubsub-count", "", "the demo's count endpoint of its Pub/Sub fake")
	fl.StringVar(&queue, "queue", demoQueue, "queue name")
	fl.BoolVar(&verbose, "verbose", false, "log the consumer's decisions to stderr")
	fl.StringVar(&shopDB, "shop-db", "", "the shop's database: record each order there through the inbox")
	fl.BoolVar(&fixed, "fixed", false, "run the fixed consumer (retired SKUs known, gift notes no longer crash)")
	return cmd
}
