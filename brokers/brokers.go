package brokers

import (
	"context"
	"sync"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqs"
)

// Transport is what Lily's tools need of a broker transport (RabbitMQ,
// Kafka, SQS, Pub/Sub, NATS JetStream): publish, declare, count in flight, and drain and
// count its dead letters.
type Transport interface {
	transport.Transport
	transport.Declarer
	transport.InFlightCounter
	transport.DeadLetterDrainer
	transport.DeadLetterCounter
}

var (
	_ Transport = (*rabbitmq.Transport)(nil)
	_ Transport = (*kafka.Transport)(nil)
	_ Transport = (*sqs.Transport)(nil)
	_ Transport = (*pubsub.Transport)(nil)
	_ Transport = (*nats.Transport)(nil)
	_ Transport = (*azqueue.Transport)(nil)
)

// IsBroker reports whether a queue's transport (lily.QueueConfig.Transport)
// is a broker, not the embedded SQLite store.
func IsBroker(kind string) bool {
	return kind == lily.TransportRabbitMQ || kind == lily.TransportKafka || kind == lily.TransportSQS || kind == lily.TransportPubSub ||
		kind == lily.TransportNATS || kind == lily.TransportAzQueue
}

// Options override the configuration's broker addresses; zero values keep
// the configuration's.
type Options struct {
	// RabbitMQURL is the AMQP URL of the broker (rabbitmq_url).
	RabbitMQURL string
	// KafkaBrokers are the Kafka seed brokers, host:port (kafka_brokers).
	KafkaBrokers []string
}

// Set holds the connections to the brokers of a configuration's queues:
// one RabbitMQ connection, one Kafka client, one SQS client, one Pub/Sub
// client and one NATS connection for all the queues, each opened on first use. It is safe for
// concurrent use; Close closes what was opened.
type Set struct {
	mu           sync.Mutex // guards the transports: 'lily serve' works concurrently
	cfg          config.Config
	url          string   // Options.RabbitMQURL, else the config's rabbitmq_url
	kafkaBrokers []string // Options.KafkaBrokers, else the config's kafka_brokers
	rmq          *rabbitmq.Transport
	kfk          *kafka.Transport
	sqsT         *sqs.Transport
	ps           *pubsub.Transport
	nt           *nats.Transport
	azq          *azqueue.Transport
}

// New returns the brokers of cfg with o's overrides. It connects to
// nothing: each broker is reached when a queue on it is first asked for.
func New(cfg config.Config, o Options) *Set {
	s := &Set{cfg: cfg, url: o.RabbitMQURL, kafkaBrokers: o.KafkaBrokers}
	if s.url == "" {
		s.url = cfg.RabbitMQURL
	}
	if len(s.kafkaBrokers) == 0 {
		s.kafkaBrokers = cfg.KafkaBrokers
	}
	return s
}

// Config returns the configuration the set was made from.
func (s *Set) Config() config.Config { return s.cfg }

// Close closes the connections opened.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rmq != nil {
		s.rmq.Close()
	}
	if s.kfk != nil {
		s.kfk.Close()
	}
	if s.sqsT != nil {
		s.sqsT.Close()
	}
	if s.ps != nil {
		s.ps.Close()
	}
	if s.nt != nil {
		s.nt.Close()
	}
	if s.azq != nil {
		s.azq.Close()
	}
}

// ForQueue returns the broker transport of a configured queue, with the
// queue's spec registered; nil (and no error) for a queue of the SQLite
// store.
func (s *Set) ForQueue(ctx context.Context, q lily.QueueConfig) (Transport, error) {
	switch q.Transport {
	case lily.TransportRabbitMQ:
		rmq, err := s.RabbitMQ(ctx)
		if err != nil {
			return nil, err
		}
		rmq.Register(q.Spec())
		return rmq, nil
	case lily.TransportKafka:
		k, err := s.Kafka(ctx)
		if err != nil {
			return nil, err
		}
		k.Register(q.Spec())
		return k, nil
	case lily.TransportSQS:
		t, err := s.SQS(ctx)
		if err != nil {
			return nil, err
		}
		t.Register(q.Spec())
		return t, nil
	case lily.TransportPubSub:
		ps, err := s.PubSub(ctx)
		if err != nil {
			return nil, err
		}
		ps.Register(q.Spec())
		return ps, nil
	case lily.TransportNATS:
		// No spec to register: the NATS transport reads what it needs
		// (the consumer's MaxAckPending) from the server.
		nt, err := s.NATS(ctx)
		if err != nil {
			return nil, err
		}
		return nt, nil
	case lily.TransportAzQueue:
		az, err := s.AzQueue(ctx)
		if err != nil {
			return nil, err
		}
		az.Register(q.Spec())
		return az, nil
	}
	return nil, nil
}

// Sources returns the broker transport of every configured queue that
// lives on a broker, by queue name.
func (s *Set) Sources(ctx context.Context) (map[string]Transport, error) {
	out := map[string]Transport{}
	for _, q := range s.cfg.Queues {
		t, err := s.ForQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		if t != nil {
			out[q.Name] = t
		}
	}
	return out, nil
}

// PeekDeadLetters returns up to limit dead letters of a broker queue that
// are not ingested yet, without consuming them; nil for a queue of the
// SQLite store.
func (s *Set) PeekDeadLetters(ctx context.Context, q lily.QueueConfig, limit int) ([]*transport.Delivery, error) {
	switch q.Transport {
	case lily.TransportRabbitMQ:
		rmq, err := s.RabbitMQ(ctx)
		if err != nil {
			return nil, err
		}
		return rmq.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(q.Name), Limit: limit})
	case lily.TransportKafka:
		k, err := s.Kafka(ctx)
		if err != nil {
			return nil, err
		}
		return k.PeekUndrained(ctx, q.Name, limit)
	case lily.TransportSQS:
		t, err := s.ForQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		return t.(*sqs.Transport).PeekDeadLetters(ctx, q.Name, limit)
	case lily.TransportPubSub:
		ps, err := s.PubSub(ctx)
		if err != nil {
			return nil, err
		}
		ds, err := ps.DeadLetters(ctx, q.Name)
		return ds[:min(limit, len(ds))], err
	case lily.TransportNATS:
		nt, err := s.NATS(ctx)
		if err != nil {
			return nil, err
		}
		return nt.PeekDeadLetters(ctx, q.Name, limit)
	case lily.TransportAzQueue:
		az, err := s.AzQueue(ctx)
		if err != nil {
			return nil, err
		}
		return az.PeekDeadLetters(ctx, q.Name, limit)
	}
	return nil, nil
}
