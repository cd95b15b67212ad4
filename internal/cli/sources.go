package cli

import (
	"context"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
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

// DeadLetterDepth implements transport.DeadLetterCounter.
func (q *queueCounters) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	if dc, ok := q.counter(queue).(transport.DeadLetterCounter); ok {
		return dc.DeadLetterDepth(ctx, queue)
	}
	return 0, nil
}

// ledgerCounters returns the ledger's counters: def (the SQLite store) for
// queues not in cfg, the broker for each [[queue]] that lives on one.
// closeAll releases the brokers.
func ledgerCounters(ctx context.Context, def transport.InFlightCounter, cfg lily.Config, url string) (*queueCounters, func(), error) {
	counters := &queueCounters{def: def, byQueue: map[string]transport.InFlightCounter{}}
	sources, closeAll, err := brokerSources(ctx, cfg, url)
	if err != nil {
		return nil, closeAll, err
	}
	for q, s := range sources {
		counters.byQueue[q] = s
	}
	return counters, closeAll, nil
}

// brokerSources connects to the brokers of the configuration's queues (so
// far RabbitMQ) and registers their specs. close releases them.
func brokerSources(ctx context.Context, c lily.Config, url string) (map[string]*rabbitmq.Transport, func(), error) {
	out := map[string]*rabbitmq.Transport{}
	var rmq *rabbitmq.Transport
	closeAll := func() {
		if rmq != nil {
			rmq.Close()
		}
	}
	for _, q := range c.Queues {
		if q.Transport != lily.TransportRabbitMQ {
			continue
		}
		if rmq == nil {
			if url == "" {
				url = c.RabbitMQURL
			}
			var err error
			if rmq, err = openRabbit(ctx, url); err != nil {
				return nil, closeAll, err
			}
		}
		rmq.Register(q.Spec())
		out[q.Name] = rmq
	}
	return out, closeAll, nil
}

// notRabbit names a queue that ingest cannot drain.
func notRabbit(q string) error {
	return usagef("--queue %s: not a [[queue]] with transport = \"rabbitmq\" in the config (only broker dead-letter queues are ingested; SQLite dead letters are in the catalog already)", q)
}
