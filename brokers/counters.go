package brokers

import (
	"context"

	"github.com/lily-mq/lily/transport"
)

// Counters answers the ledger's per-queue questions — in flight, dead
// letters not yet ingested — from the transport each queue lives on: the
// broker of a configured broker queue, a default counter (the SQLite
// store, or nil) for the others.
type Counters struct {
	byQueue map[string]transport.InFlightCounter
	def     transport.InFlightCounter // queues not on a broker of the configuration
}

var (
	_ transport.InFlightCounter   = (*Counters)(nil)
	_ transport.DeadLetterCounter = (*Counters)(nil)
	_ transport.InFlightBreakdown = (*Counters)(nil)
)

// Counters opens the transport of every configured broker queue (Sources)
// and returns the counters of the configuration: def, which may be nil,
// answers for the queues that are not on a broker.
func (s *Set) Counters(ctx context.Context, def transport.InFlightCounter) (*Counters, error) {
	sources, err := s.Sources(ctx)
	if err != nil {
		return nil, err
	}
	c := &Counters{def: def, byQueue: map[string]transport.InFlightCounter{}}
	for q, t := range sources {
		c.byQueue[q] = t
	}
	return c, nil
}

func (c *Counters) counter(queue string) transport.InFlightCounter {
	if t, ok := c.byQueue[queue]; ok {
		return t
	}
	return c.def
}

// InFlight implements transport.InFlightCounter; 0 for a queue without a
// counter.
func (c *Counters) InFlight(ctx context.Context, queue string) (int64, error) {
	t := c.counter(queue)
	if t == nil {
		return 0, nil
	}
	return t.InFlight(ctx, queue)
}

// InFlightParts implements transport.InFlightBreakdown: the queue's
// transport's breakdown, or its InFlight not broken down.
func (c *Counters) InFlightParts(ctx context.Context, queue string) (transport.InFlightParts, error) {
	t := c.counter(queue)
	if b, ok := t.(transport.InFlightBreakdown); ok {
		return b.InFlightParts(ctx, queue)
	}
	n, err := c.InFlight(ctx, queue)
	return transport.InFlightParts{Other: n}, err
}

// DeadLetterDepth implements transport.DeadLetterCounter: the dead letters
// the queue's broker still holds, 0 when its transport does not count
// them.
func (c *Counters) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	if dc, ok := c.counter(queue).(transport.DeadLetterCounter); ok {
		return dc.DeadLetterDepth(ctx, queue)
	}
	return 0, nil
}
