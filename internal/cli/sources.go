package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqs"
)

// queueCounters answers the ledger's per-queue questions — in flight, dead
// letters not yet ingested — from the transport each queue lives on.
type queueCounters struct {
	byQueue map[string]transport.InFlightCounter
	def     transport.InFlightCounter // queues not in the configuration
}

var (
	_ transport.InFlightCounter   = (*queueCounters)(nil)
	_ transport.DeadLetterCounter = (*queueCounters)(nil)
	_ transport.InFlightBreakdown = (*queueCounters)(nil)
)

func (q *queueCounters) counter(queue string) transport.InFlightCounter {
	if c, ok := q.byQueue[queue]; ok {
		return c
	}
	return q.def
}

// InFlight implements transport.InFlightCounter.
func (q *queueCounters) InFlight(ctx context.Context, queue string) (int64, error) {
	c := q.counter(queue)
	if c == nil {
		return 0, nil
	}
	return c.InFlight(ctx, queue)
}

// InFlightParts implements transport.InFlightBreakdown: the queue's
// transport's breakdown, or its InFlight not broken down.
func (q *queueCounters) InFlightParts(ctx context.Context, queue string) (transport.InFlightParts, error) {
	c := q.counter(queue)
	if b, ok := c.(transport.InFlightBreakdown); ok {
		return b.InFlightParts(ctx, queue)
	}
	n, err := q.InFlight(ctx, queue)
	return transport.InFlightParts{Other: n}, err
}

// DeadLetterDepth implements transport.DeadLetterCounter.
func (q *queueCounters) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	if dc, ok := q.counter(queue).(transport.DeadLetterCounter); ok {
		return dc.DeadLetterDepth(ctx, queue)
	}
	return 0, nil
}

// ledgerCounters returns the ledger's counters: def (the SQLite store) for
// queues not in cfg, the broker for each [[queue]] that lives on one (url
// and kafkaBrokers, when not empty, override the configuration's). The
// returned function releases the broker connections.
func ledgerCounters(ctx context.Context, def transport.InFlightCounter, cfg config.Config, url, kafkaBrokers string) (*queueCounters, func(), error) {
	counters := &queueCounters{def: def, byQueue: map[string]transport.InFlightCounter{}}
	brk, err := newBrokers(cfg, url, kafkaBrokers)
	if err != nil {
		return nil, func() {}, err
	}
	sources, err := brk.sources(ctx)
	if err != nil {
		return nil, brk.Close, err
	}
	for q, s := range sources {
		counters.byQueue[q] = s
	}
	return counters, brk.Close, nil
}

// brokerTransport is what the commands need of a broker transport
// (RabbitMQ, Kafka): publish, declare, count in flight and drain and count
// its dead letters.
type brokerTransport interface {
	transport.Transport
	transport.Declarer
	transport.InFlightCounter
	transport.DeadLetterDrainer
	transport.DeadLetterCounter
}

var (
	_ brokerTransport = (*rabbitmq.Transport)(nil)
	_ brokerTransport = (*kafka.Transport)(nil)
	_ brokerTransport = (*sqs.Transport)(nil)
	_ brokerTransport = (*pubsub.Transport)(nil)
)

// isBroker reports whether a queue's transport is a broker.
func isBroker(kind string) bool {
	return kind == lily.TransportRabbitMQ || kind == lily.TransportKafka || kind == lily.TransportSQS || kind == lily.TransportPubSub
}

// kafkaConnectTimeout bounds how long a command waits for a Kafka broker.
const kafkaConnectTimeout = 10 * time.Second

// brokersFlag registers --brokers, the Kafka seed brokers.
func brokersFlag(cmd *cobra.Command, s *string) {
	cmd.Flags().StringVar(s, "brokers", "", "Kafka seed brokers host:port,... (default: the config's kafka_brokers)")
}

// parseBrokersFlag checks a --brokers value; empty means the default.
func parseBrokersFlag(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	bs := kafka.ParseBrokers(s)
	for _, b := range bs {
		if err := config.ValidateBroker(b); err != nil {
			return nil, usagef("--brokers %q: %q %v", s, b, err)
		}
	}
	return bs, nil
}

// brokers connects, on first use, to the brokers of a configuration's
// queues: one RabbitMQ connection and one Kafka client for all.
type brokers struct {
	mu           sync.Mutex // guards rmq and kfk: 'lily serve' works concurrently
	cfg          config.Config
	url          string   // --url, else the config's rabbitmq_url
	kafkaBrokers []string // --brokers, else the config's kafka_brokers
	rmq          *rabbitmq.Transport
	kfk          *kafka.Transport
	sqsT         *sqs.Transport // sqs.go
	ps           *pubsub.Transport
	// psOptions adjusts the Pub/Sub options (the demo's in-process fake).
	psOptions func(*pubsub.Options)
}

// newBrokers returns the brokers of c, with --url and --brokers (either
// may be empty) overriding the configuration.
func newBrokers(c config.Config, url, brokersArg string) (*brokers, error) {
	bs, err := parseBrokersFlag(brokersArg)
	if err != nil {
		return nil, err
	}
	b := &brokers{cfg: c, url: url, kafkaBrokers: bs}
	if b.url == "" {
		b.url = c.RabbitMQURL
	}
	if len(b.kafkaBrokers) == 0 {
		b.kafkaBrokers = c.KafkaBrokers
	}
	return b, nil
}

// Close closes the connections opened.
func (b *brokers) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rmq != nil {
		b.rmq.Close()
	}
	if b.kfk != nil {
		b.kfk.Close()
	}
	if b.sqsT != nil {
		b.sqsT.Close()
	}
	if b.ps != nil {
		b.ps.Close()
	}
}

func (b *brokers) rabbit(ctx context.Context) (*rabbitmq.Transport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rmq == nil {
		// The ledger counts what the broker holds for every consumer, in
		// every process, through the management API (in-flight counting).
		mgmt, err := rabbitmq.ManagementFor(b.url)
		if err != nil {
			return nil, err
		}
		rmq, err := openRabbitWith(ctx, rabbitmq.Options{URL: b.url, Management: mgmt})
		if err != nil {
			return nil, err
		}
		b.rmq = rmq
	}
	return b.rmq, nil
}

func (b *brokers) kafka(ctx context.Context) (*kafka.Transport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kfk == nil {
		k, err := openKafka(ctx, kafka.Options{Brokers: b.kafkaBrokers, Partitions: b.cfg.Partitions(),
			DeadLetterTopics: b.cfg.KafkaDeadLetterTopics, DeadLetterRetention: dltRetentions(b.cfg)})
		if err != nil {
			return nil, err
		}
		b.kfk = k
	}
	return b.kfk, nil
}

// forQueue returns the broker transport of a configured queue, with the
// queue's spec registered; nil for a queue of the SQLite store.
func (b *brokers) forQueue(ctx context.Context, q lily.QueueConfig) (brokerTransport, error) {
	switch q.Transport {
	case lily.TransportRabbitMQ:
		rmq, err := b.rabbit(ctx)
		if err != nil {
			return nil, err
		}
		rmq.Register(q.Spec())
		return rmq, nil
	case lily.TransportKafka:
		k, err := b.kafka(ctx)
		if err != nil {
			return nil, err
		}
		k.Register(q.Spec())
		return k, nil
	case lily.TransportSQS:
		t, err := b.sqsTransport(ctx)
		if err != nil {
			return nil, err
		}
		t.Register(q.Spec())
		return t, nil
	case lily.TransportPubSub:
		ps, err := b.pubsub(ctx)
		if err != nil {
			return nil, err
		}
		ps.Register(q.Spec())
		return ps, nil
	}
	return nil, nil
}

// sources returns the broker transport of every configured queue that
// lives on a broker.
func (b *brokers) sources(ctx context.Context) (map[string]brokerTransport, error) {
	out := map[string]brokerTransport{}
	for _, q := range b.cfg.Queues {
		t, err := b.forQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		if t != nil {
			out[q.Name] = t
		}
	}
	return out, nil
}

// openKafka connects to a Kafka cluster, failing after
// kafkaConnectTimeout; the client's own log is kept quiet.
func openKafka(ctx context.Context, o kafka.Options) (*kafka.Transport, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaConnectTimeout)
	defer cancel()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tr, err := kafka.Open(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka (check --brokers or the config's kafka_brokers): %w", err)
	}
	return tr, nil
}

// notBroker names a queue that ingest cannot drain.
func notBroker(q string) error {
	return usagef("--queue %s: not a [[queue]] with transport = \"rabbitmq\", \"kafka\" or \"sqs\" in the config (only broker dead-letter queues and topics are ingested; SQLite dead letters are in the catalog already)", q)
}

// peekDeadLetters returns up to limit dead letters of a broker queue that
// are not ingested yet, without consuming them.
func (b *brokers) peekDeadLetters(ctx context.Context, q lily.QueueConfig, limit int) ([]*transport.Delivery, error) {
	switch q.Transport {
	case lily.TransportRabbitMQ:
		rmq, err := b.rabbit(ctx)
		if err != nil {
			return nil, err
		}
		return rmq.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(q.Name), Limit: limit})
	case lily.TransportKafka:
		k, err := b.kafka(ctx)
		if err != nil {
			return nil, err
		}
		return k.PeekUndrained(ctx, q.Name, limit)
	case lily.TransportSQS:
		t, err := b.forQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		return t.(*sqs.Transport).PeekDeadLetters(ctx, q.Name, limit)
	case lily.TransportPubSub:
		ps, err := b.pubsub(ctx)
		if err != nil {
			return nil, err
		}
		ds, err := ps.DeadLetters(ctx, q.Name)
		return ds[:min(limit, len(ds))], err
	}
	return nil, nil
}
