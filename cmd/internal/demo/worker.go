package demo

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/idle"
	"github.com/lily-mq/lily/config"
)

// QueueConfig is the demo queue's configuration: three retries tens of
// milliseconds apart, the default delivery limit of 5 — or, consumed
// through Kafka share group shareGroup (not empty), lily.ShareGroupDeliveryLimit
// (share.go).
func QueueConfig(name, kind, shareGroup string) lily.QueueConfig {
	qc := lily.QueueConfig{
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
	if shareGroup != "" {
		qc.KafkaShareGroup = shareGroup
		qc.DeliveryLimit = new(lily.ShareGroupDeliveryLimit)
	}
	return qc
}

// visibility is the demo's lease length. The supervisor gives a dead
// worker's leases back at once (RecoverLeases), so this is only the
// fallback if the supervisor itself dies.
const visibility = 10 * time.Second

// WorkerFlags are the flags of the demo's worker process, registered by
// NewWorkerFlags. The demo passes them when it starts a worker.
type WorkerFlags struct {
	db, instance, kind, url, queue string
	shopDB                         string
	brokers, psEndpoint, psCount   string
	shareGroup                     string
	verbose, fixed, sqsQuery       bool
}

// WorkerShort is the worker command's one-line help; the command is
// hidden, named demo-worker, and started by the demo.
const WorkerShort = "The demo's worker process (started by the demo)"

// NewWorkerFlags registers the worker's flags on fs and returns them, to
// pass to RunWorker once fs is parsed.
func NewWorkerFlags(fs *pflag.FlagSet) *WorkerFlags {
	w := &WorkerFlags{}
	fs.StringVar(&w.db, "db", "", "database file (store or catalog)")
	fs.StringVar(&w.instance, "instance", "demo-worker-"+strconv.Itoa(os.Getpid()), "consumer instance ID (its leases)")
	fs.StringVar(&w.kind, "transport", lily.TransportSQLite, "sqlite, rabbitmq, kafka, sqs, pubsub, nats or azqueue")
	fs.StringVar(&w.url, "url", config.DefaultRabbitMQURL, "AMQP URL; NATS server URL (nats://...) with --transport nats; queue service URL with --transport azqueue")
	fs.StringVar(&w.brokers, "brokers", "", "Kafka seed brokers (the demo passes its cluster's)")
	fs.StringVar(&w.shareGroup, "share-group", "", "consume the Kafka queue through this share group (the demo passes its own)")
	fs.BoolVar(&w.sqsQuery, "sqs-query", false, "the SQS endpoint (--url) speaks the Query protocol (the demo's emulator)")
	fs.StringVar(&w.psEndpoint, "pubsub-endpoint", "", "the demo's Pub/Sub fake (the demo passes its own)")
	fs.StringVar(&w.psCount, "pubsub-count", "", "the demo's count endpoint of its Pub/Sub fake")
	fs.StringVar(&w.queue, "queue", DefaultQueue, "queue name")
	fs.BoolVar(&w.verbose, "verbose", false, "log the consumer's decisions to stderr")
	fs.StringVar(&w.shopDB, "shop-db", "", "the shop's database: record each order there through the inbox")
	fs.BoolVar(&w.fixed, "fixed", false, "run the fixed consumer (retired SKUs known, gift notes no longer crash)")
	return w
}

// RunWorker is the demo's worker process: it consumes the demo queue
// until nothing is left in flight, then returns nil (the process exits 0).
// The demo runs it as a child process and restarts it whenever it dies.
func RunWorker(ctx context.Context, w *WorkerFlags, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	qc := QueueConfig(w.queue, w.kind, w.shareGroup)
	if w.kind == lily.TransportPubSub && w.psEndpoint == "" {
		return usagef("demo-worker --transport pubsub needs --pubsub-endpoint and --pubsub-count (the demo passes its fake's)")
	}
	b, err := openBackend(ctx, connection{kind: w.kind, url: w.url, brokers: w.brokers, sqsQuery: w.sqsQuery,
		pubsubEndpoint: w.psEndpoint, pubsubCount: w.psCount}, w.db, qc)
	if err != nil {
		return err
	}
	defer b.Close()
	var logOut io.Writer = io.Discard
	if w.verbose {
		logOut = stderr
	}
	h, version := handler, "1.4.2"
	if w.fixed { // the second half of the demo: the bugs are fixed
		h, version = handlerFixed, fixedVersion
	}
	if w.shopDB != "" { // the order is recorded through the inbox (inbox.go)
		shop, err := openShop(ctx, w.shopDB)
		if err != nil {
			return err
		}
		defer shop.Close()
		h = shopHandler(shop, w.fixed)
	}
	c, err := lily.NewConsumer(b.tr, lily.HandlerFunc(h), lily.ConsumerOptions{
		Queue: qc, Concurrency: 4, Prefetch: 64, Instance: w.instance,
		Name: "orders-consumer", Version: version, ReceiveWait: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logOut, nil)),
	})
	if err != nil {
		return err
	}
	// Quiet: nothing left in flight (ready, leased or waiting to be
	// retried) — every message is acked or dead-lettered — for longer
	// than the longest retry delay.
	go idle.StopWhenIdle(ctx, cancel, b.counter(), qc, 200*time.Millisecond)
	return c.Run(ctx)
}
