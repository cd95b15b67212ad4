package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

// The transports and catalogs of the matrix (-transports, -catalogs).
const (
	trSQLite   = "sqlite"
	trRabbitMQ = "rabbitmq"
	trKafka    = "kafka"

	catNone     = "none"
	catSQLite   = "sqlite"
	catPostgres = "postgres"
)

// specEnv carries a child's spec (JSON): its role and what it opens.
const specEnv = "MATRIXBENCH_SPEC"

// The roles of a child process.
const (
	roleConsumer = "consumer" // one consumer process of a Lily cell
	roleCeiling  = "ceiling"  // one writer process of a bare-ceiling cell
	roleKafka    = "kfake"    // the Kafka broker of the Kafka cells
)

// spec is what a child process is told: its role and what it opens. The
// parent and its children open transports and catalogs through the same
// functions (openTransport, queueConfig), so both see the same queue.
type spec struct {
	Role       string
	Transport  string // trSQLite, trRabbitMQ, trKafka
	Catalog    string // catNone, catSQLite, catPostgres
	CatalogURL string // the SQLite catalog file or the PostgreSQL URL with the cell's schema
	Store      string // the SQLite transport's file
	Queue      string
	AMQP       string
	Kafka      string // the kfake broker's address
	KafkaPort  int
	IDs        string // where a consumer writes the event IDs it acked, when it stops
	// A ceiling writer's share: keys i with i % Procs == Index, of N,
	// Batch per statement.
	Index, Procs, N, Batch int
	BodySize               int
}

func (s spec) env() string {
	b, _ := json.Marshal(s)
	return specEnv + "=" + string(b)
}

func readSpec() (spec, bool, error) {
	v := os.Getenv(specEnv)
	if v == "" {
		return spec{}, false, nil
	}
	var s spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, true, fmt.Errorf("%s: %w", specEnv, err)
	}
	return s, true, nil
}

// accounted reports whether the cell counts through ledger.Account: a
// broker transport with a catalog. The SQLite transport keeps its ledger
// in its own file and transactions and is never wrapped.
func (s spec) accounted() bool { return s.Transport != trSQLite && s.Catalog != catNone }

// queueConfig is the cell's queue: retries and dead-lettering at their
// defaults (no message fails in the matrix), delivery limit 20 as in
// rabbitbench.
func queueConfig(s spec) lily.QueueConfig {
	t := map[string]string{trSQLite: lily.TransportSQLite, trRabbitMQ: lily.TransportRabbitMQ, trKafka: lily.TransportKafka}[s.Transport]
	return lily.QueueConfig{Name: s.Queue, Transport: t, DeliveryLimit: new(20)}.WithDefaults()
}

// quiet logs errors only, to standard error.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// backend is a transport, counted through a catalog or not, as a cell's
// processes open it.
type backend struct {
	raw   transport.Transport // the transport itself (in-flight counts, deletion)
	tr    transport.Transport // what consumers and the publisher use: raw or ledger.Account(raw)
	cat   *catalog.Store      // nil without a catalog
	close func()
}

// openBackend opens the cell's transport and, for a counted cell, its
// catalog and ledger wrapper. Queues are registered, not declared
// (declare does that, once, in the parent).
func openBackend(ctx context.Context, s spec) (*backend, error) {
	b := &backend{}
	var closers []func()
	b.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	spec := queueConfig(s).Spec()
	switch s.Transport {
	case trSQLite:
		t, err := sqlite.Open(ctx, s.Store, sqlite.Options{})
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { t.Close() })
		// The store's ledger and catalog are its own file.
		cat, err := catalog.New(ctx, t.DB())
		if err != nil {
			b.close()
			return nil, err
		}
		b.raw, b.cat = t, cat
	case trRabbitMQ:
		t, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: s.AMQP})
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { t.Close() })
		t.Register(spec)
		b.raw = t
	case trKafka:
		t, err := kafka.Open(ctx, kafkaOptions(s.Kafka))
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { t.Close() })
		t.Register(spec)
		b.raw = t
	default:
		return nil, fmt.Errorf("-transports: unknown transport %q (want sqlite, rabbitmq or kafka)", s.Transport)
	}
	b.tr = b.raw
	if s.accounted() {
		cat, err := catalog.Open(ctx, s.CatalogURL)
		if err != nil {
			b.close()
			return nil, err
		}
		acc := ledger.Account(b.raw, ledger.New(cat))
		// The wrapper's Close closes the transport too: it replaces the
		// transport's closer, and runs before the catalog's.
		closers = []func(){func() { cat.Close() }, func() { acc.Close() }}
		b.tr, b.cat = acc, cat
	}
	return b, nil
}

// partitions is the partition count of the Kafka cells' topics: one per
// consumer process of the largest -procs (4), so that every process of
// every cell owns a partition.
const partitions = 4

// kafkaOptions are the transport's options for the kfake broker at addr:
// short heartbeats so that the group's first rebalance, which is on the
// clock, takes a fraction of a second.
func kafkaOptions(addr string) kafka.Options {
	return kafka.Options{Brokers: []string{addr}, Partitions: partitions,
		SessionTimeout: 3 * time.Second, RebalanceTimeout: 5 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RevokeTimeout: 2 * time.Second, MetadataMaxAge: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// declare declares the cell's queue through b (the ledger registers it
// too when b counts).
func declare(ctx context.Context, b *backend, s spec) error {
	d, ok := b.tr.(transport.Declarer)
	if !ok {
		return fmt.Errorf("transport %s cannot declare queues", s.Transport)
	}
	return d.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{queueConfig(s).Spec()}})
}

// remove deletes the cell's broker queue or topics (the SQLite file and
// the PostgreSQL schema go with the cell's directory and schema).
func remove(ctx context.Context, b *backend, s spec) {
	spec := queueConfig(s).Spec()
	switch t := b.raw.(type) {
	case *rabbitmq.Transport:
		t.DeleteQueues(ctx, spec)
	case *kafka.Transport:
		t.DeleteTopics(ctx, spec)
	}
}
