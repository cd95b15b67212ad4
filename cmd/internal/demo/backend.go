package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

// connection says where the demo's queue lives: the transport, and for a
// broker how to reach it (--url for RabbitMQ and SQS, --brokers for Kafka;
// without them the demo starts an in-process broker from em).
type connection struct {
	kind    string
	url     string
	brokers string
	// sqsQuery: the SQS endpoint (url) speaks the Query protocol (the
	// demo's in-process emulator, passed to the workers).
	sqsQuery bool
	// pubsubEndpoint and pubsubCount reach the parent's Pub/Sub fake (a
	// worker); empty starts one (the demo).
	pubsubEndpoint, pubsubCount string
	// em starts the in-process brokers; nil in the lily binary and in a
	// worker, which reaches its parent's.
	em Emulators
}

// backend is where the demo's queue lives: the embedded SQLite store,
// or a broker (RabbitMQ, Kafka) with the catalog in the SQLite file.
type backend struct {
	kind  string // lily.TransportSQLite, lily.TransportRabbitMQ or lily.TransportKafka
	url   string
	queue lily.QueueConfig
	db    string

	tr      transport.Transport // what publishes and consumes
	cat     *catalog.Store
	sq      *sqlite.Transport // SQLite: the store itself
	broker  brokers.Transport // RabbitMQ, Kafka, SQS, Pub/Sub or NATS: the broker connection
	kafka   *kafkaBackend     // Kafka: the cluster (kafka.go)
	sqs     *sqsBackend       // SQS: the endpoint (sqs.go)
	pubsub  *pubsubBackend    // Pub/Sub: the fake (pubsub.go)
	nats    *natsBackend      // NATS JetStream: the server (nats.go)
	azq     *azqueueBackend   // Azure Storage queues: the service (azqueue.go)
	closeFn []func()
}

// openBackend opens the transport and catalog for the demo's queue. A
// worker process opens its own with the same arguments.
func openBackend(ctx context.Context, conn connection, db string, qc lily.QueueConfig) (*backend, error) {
	b := &backend{kind: conn.kind, url: conn.url, queue: qc, db: db}
	switch conn.kind {
	case lily.TransportSQLite:
		tr, err := sqlite.Open(ctx, db, sqlite.Options{VisibilityTimeout: visibility, PollInterval: 5 * time.Millisecond})
		if err != nil {
			return nil, err
		}
		b.sq, b.tr = tr, tr
		b.closeFn = append(b.closeFn, func() { tr.Close() })
		cat, err := catalog.New(ctx, tr.DB())
		if err != nil {
			b.Close()
			return nil, err
		}
		b.cat = cat
		return b, nil
	case lily.TransportRabbitMQ, lily.TransportKafka, lily.TransportSQS, lily.TransportPubSub, lily.TransportNATS, lily.TransportAzQueue:
	default:
		return nil, usagef("--transport %q: must be sqlite, rabbitmq, kafka, sqs, pubsub, nats or azqueue", conn.kind)
	}
	if conn.emulated() != "" && conn.em == nil {
		return nil, conn.errNoEmulator()
	}
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	b.cat = cat
	b.closeFn = append(b.closeFn, func() { cat.Close() })
	if conn.kind == lily.TransportSQS {
		s, err := openSQSBackend(conn)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.sqs, b.broker = s, s.tr
		b.closeFn = append(b.closeFn, s.Close)
	} else if conn.kind == lily.TransportPubSub {
		p, err := openPubSubBackend(ctx, conn)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.pubsub, b.broker = p, p.tr
		b.closeFn = append(b.closeFn, p.Close)
	} else if conn.kind == lily.TransportNATS {
		n, err := openNATSBackend(conn)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.nats, b.broker = n, n.tr
		b.closeFn = append(b.closeFn, n.Close)
	} else if conn.kind == lily.TransportAzQueue {
		a, err := openAzQueueBackend(conn)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.azq, b.broker = a, a.tr
		b.closeFn = append(b.closeFn, a.Close)
	} else if conn.kind == lily.TransportKafka {
		k, err := openKafkaBackend(ctx, conn)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.kafka, b.broker = k, k.tr
		b.closeFn = append(b.closeFn, k.Close)
	} else {
		rmq, err := brokers.OpenRabbitMQ(ctx, rabbitmq.Options{URL: conn.url})
		if err != nil {
			b.Close()
			return nil, err
		}
		b.broker = rmq
		b.closeFn = append(b.closeFn, func() { rmq.Close() })
	}
	// Registered, not declared: the worker finds the topology the demo
	// declared.
	if r, ok := b.broker.(interface{ Register(...transport.QueueSpec) }); ok {
		r.Register(qc.Spec())
	}
	b.tr = ledger.Account(b.broker, ledger.New(cat))
	return b, nil
}

// Close releases everything the backend opened.
func (b *backend) Close() {
	for i := len(b.closeFn) - 1; i >= 0; i-- {
		b.closeFn[i]()
	}
}

// declare creates the queue (and its topology); on a broker the queue must
// be empty, so that the demo's ledger is the demo's alone.
func (b *backend) declare(ctx context.Context) error {
	d := b.tr.(transport.Declarer)
	if err := d.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{b.queue.Spec()}}); err != nil {
		return err
	}
	if b.broker != nil {
		n, err := b.broker.InFlight(ctx, b.queue.Name)
		if err != nil {
			return err
		}
		dl, err := b.broker.DeadLetterDepth(ctx, b.queue.Name)
		if err != nil {
			return err
		}
		if n+dl > 0 {
			return usagef("--queue %s: the broker already holds %d messages and %d dead letters for it; the demo needs an empty queue (choose another --queue)", b.queue.Name, n, dl)
		}
	}
	return nil
}

// counter is the in-flight (and, on a broker, not yet ingested DLQ)
// counter for the ledger.
func (b *backend) counter() transport.InFlightCounter {
	if b.broker != nil {
		return b.broker
	}
	return b.sq
}

// lost is queue's unaccounted-for count in the ledger (0 for a queue
// without a ledger row).
func (b *backend) lost(ctx context.Context, queue string) (int64, error) {
	rows, err := ledger.New(b.cat).Rows(ctx, b.counter())
	if err != nil {
		return 0, err
	}
	for _, r := range rows {
		if r.Queue == queue {
			return r.Lost, nil
		}
	}
	return 0, nil
}

// recover gives a dead worker's deliveries back at once. A broker does it
// by itself when the worker's connection dies (Kafka: the restarted
// worker, a static group member, takes its partitions back).
func (b *backend) recover(ctx context.Context, instance string) (int, error) {
	if b.sq != nil {
		return b.sq.RecoverLeases(ctx, &transport.RecoverParams{Consumer: instance})
	}
	return 0, nil
}

// hiddenDeadLetters says how many dead letters the broker's dead-letter
// queue still holds, not ingested into the catalog (so not counted by
// reason): "" when there is no broker or none is left.
func (b *backend) hiddenDeadLetters(ctx context.Context) string {
	if b.broker == nil {
		return ""
	}
	n, err := b.broker.DeadLetterDepth(ctx, b.queue.Name)
	switch {
	case err != nil:
		return fmt.Sprintf(" (the broker's dead-letter queue could not be counted: %v)", err)
	case n > 0:
		return fmt.Sprintf(" (%d dead letters are still in the broker's dead-letter queue, not ingested, so not counted by reason)", n)
	}
	return ""
}

// finishWithin bounds how long finish waits for a dead letter the broker
// still hides: three of the demo's SQS visibility timeouts.
const finishWithin = 3 * sqsVisibility

// finish ingests the broker's dead letters into the catalog, until the
// broker's dead-letter queue reads empty or finishWithin has passed. One
// drain is not always enough: a dead letter in flight in the DLQ (received
// and neither deleted nor given back yet: seen on the SQS emulator under
// load) is not drained until its visibility timeout ends, and the demo's
// dead letters by reason would miss it. What is still there after
// finishWithin stays counted as dead-lettered in the broker, and the
// reconcile shows it.
func (b *backend) finish(ctx context.Context) error {
	if b.broker == nil {
		return nil
	}
	deadline := time.Now().Add(finishWithin)
	for {
		if _, err := b.cat.Ingest(ctx, b.broker, b.queue.Name); err != nil {
			return fmt.Errorf("demo: ingest the dead letters: %w", err)
		}
		n, err := b.broker.DeadLetterDepth(ctx, b.queue.Name)
		if err != nil || n == 0 || time.Now().After(deadline) {
			return nil // an unreadable depth is the reconcile's to report
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // the broker shows hidden dead letters again on its own clock
		}
	}
}
