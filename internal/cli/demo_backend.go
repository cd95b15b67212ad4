package cli

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

// demoConn says where the demo's queue lives: the transport, and for a
// broker how to reach it (--url for RabbitMQ, --brokers for Kafka; no
// --brokers starts an in-process Kafka).
type demoConn struct {
	kind    string
	url     string
	brokers string
	// sqsQuery: the SQS endpoint (url) speaks the Query protocol (the
	// demo's in-process emulator, passed to the workers).
	sqsQuery bool
	// pubsubEndpoint and pubsubCount reach the parent's Pub/Sub fake (a
	// worker); empty starts one (the demo).
	pubsubEndpoint, pubsubCount string
}

// demoBackend is where the demo's queue lives: the embedded SQLite store,
// or a broker (RabbitMQ, Kafka) with the catalog in the SQLite file.
type demoBackend struct {
	kind  string // lily.TransportSQLite, lily.TransportRabbitMQ or lily.TransportKafka
	url   string
	queue lily.QueueConfig
	db    string

	tr      transport.Transport // what publishes and consumes
	cat     *catalog.Store
	sq      *sqlite.Transport // SQLite: the store itself
	broker  brokers.Transport // RabbitMQ or Kafka: the broker connection
	kafka   *demoKafka        // Kafka: the cluster
	sqs     *demoSQS          // SQS: the endpoint (demo_sqs.go)
	pubsub  *demoPubSub       // Pub/Sub: the fake
	closeFn []func()
}

// openDemoBackend opens the transport and catalog for the demo's queue. A
// worker process opens its own with the same arguments.
func openDemoBackend(ctx context.Context, conn demoConn, db string, qc lily.QueueConfig) (*demoBackend, error) {
	b := &demoBackend{kind: conn.kind, url: conn.url, queue: qc, db: db}
	switch conn.kind {
	case lily.TransportSQLite:
		tr, err := sqlite.Open(ctx, db, sqlite.Options{VisibilityTimeout: demoVisibility, PollInterval: 5 * time.Millisecond})
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
	case lily.TransportRabbitMQ, lily.TransportKafka, lily.TransportSQS, lily.TransportPubSub:
	default:
		return nil, usagef("--transport %q: must be sqlite, rabbitmq, kafka, sqs or pubsub", conn.kind)
	}
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	b.cat = cat
	b.closeFn = append(b.closeFn, func() { cat.Close() })
	if conn.kind == lily.TransportSQS {
		s, err := openDemoSQS(conn)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.sqs, b.broker = s, s.tr
		b.closeFn = append(b.closeFn, func() { s.tr.Close() })
	} else if conn.kind == lily.TransportPubSub {
		p, err := openDemoPubSub(ctx, conn.pubsubEndpoint, conn.pubsubCount)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.pubsub, b.broker = p, p.tr
		b.closeFn = append(b.closeFn, p.Close)
	} else if conn.kind == lily.TransportKafka {
		k, err := openDemoKafka(ctx, conn.brokers)
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
func (b *demoBackend) Close() {
	for i := len(b.closeFn) - 1; i >= 0; i-- {
		b.closeFn[i]()
	}
}

// declare creates the queue (and its topology); on a broker the queue must
// be empty, so that the demo's ledger is the demo's alone.
func (b *demoBackend) declare(ctx context.Context) error {
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
func (b *demoBackend) counter() transport.InFlightCounter {
	if b.broker != nil {
		return b.broker
	}
	return b.sq
}

// lost is queue's unaccounted-for count in the ledger (0 for a queue
// without a ledger row).
func (b *demoBackend) lost(ctx context.Context, queue string) (int64, error) {
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
func (b *demoBackend) recover(ctx context.Context, instance string) (int, error) {
	if b.sq != nil {
		return b.sq.RecoverLeases(ctx, &transport.RecoverParams{Consumer: instance})
	}
	return 0, nil
}

// finish drains a broker's dead letters into the catalog.
func (b *demoBackend) finish(ctx context.Context) error {
	if b.broker == nil {
		return nil
	}
	if _, err := b.cat.Ingest(ctx, b.broker, b.queue.Name); err != nil {
		return fmt.Errorf("demo: ingest the dead letters: %w", err)
	}
	return nil
}
