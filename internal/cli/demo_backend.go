package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

// demoBackend is where the demo's queue lives: the embedded SQLite store,
// or a RabbitMQ broker with the catalog in the SQLite file.
type demoBackend struct {
	kind  string // lily.TransportSQLite or lily.TransportRabbitMQ
	url   string
	queue lily.QueueConfig
	db    string

	tr      transport.Transport // what publishes and consumes
	cat     *catalog.Store
	sq      *sqlite.Transport   // SQLite: the store itself
	rmq     *rabbitmq.Transport // RabbitMQ: the broker connection
	closeFn []func()
}

// openDemoBackend opens the transport and catalog for the demo's queue. A
// worker process opens its own with the same arguments.
func openDemoBackend(ctx context.Context, kind, url, db string, qc lily.QueueConfig) (*demoBackend, error) {
	b := &demoBackend{kind: kind, url: url, queue: qc, db: db}
	switch kind {
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
	case lily.TransportRabbitMQ:
		cat, err := catalog.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		b.cat = cat
		b.closeFn = append(b.closeFn, func() { cat.Close() })
		rmq, err := openRabbit(ctx, url)
		if err != nil {
			b.Close()
			return nil, err
		}
		rmq.Register(qc.Spec())
		b.rmq = rmq
		b.closeFn = append(b.closeFn, func() { rmq.Close() })
		b.tr = catalog.Account(rmq, cat)
	default:
		return nil, usagef("--transport %q: must be sqlite or rabbitmq", kind)
	}
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
	if b.rmq != nil {
		n, err := b.rmq.InFlight(ctx, b.queue.Name)
		if err != nil {
			return err
		}
		dl, err := b.rmq.DeadLetterDepth(ctx, b.queue.Name)
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
	if b.rmq != nil {
		return b.rmq
	}
	return b.sq
}

// recover gives a dead worker's deliveries back at once. A broker does it
// by itself when the worker's connection dies.
func (b *demoBackend) recover(ctx context.Context, instance string) (int, error) {
	if b.sq != nil {
		return b.sq.RecoverLeases(ctx, &transport.RecoverParams{Consumer: instance})
	}
	return 0, nil
}

// finish drains a broker's dead letters into the catalog.
func (b *demoBackend) finish(ctx context.Context) error {
	if b.rmq == nil {
		return nil
	}
	if _, err := b.cat.Ingest(ctx, b.rmq, b.queue.Name); err != nil {
		return fmt.Errorf("demo: ingest the dead letters: %w", err)
	}
	return nil
}
