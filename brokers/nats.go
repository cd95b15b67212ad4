package brokers

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/nats"
)

// NATSOptions are the transport options of a configuration's nats queues:
// nats_url, nats_ack_wait_seconds, nats_retention and the streams and
// consumers nats_queues adopts.
func NATSOptions(c config.Config) nats.Options {
	o := nats.Options{URL: c.NATSURL, AckWait: c.NATSAckWait(), Retention: c.NATSRetention,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if len(c.NATSQueues) > 0 {
		o.Queues = map[string]nats.Binding{}
		for q, b := range c.NATSQueues {
			o.Queues[q] = nats.Binding{Stream: b.Stream, Consumer: b.Consumer, Subject: b.Subject}
		}
	}
	return o
}

// NATS returns the set's NATS JetStream transport, connected on first use.
func (s *Set) NATS(context.Context) (*nats.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nt == nil {
		t, err := nats.Open(NATSOptions(s.cfg))
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		s.nt = t
	}
	return s.nt, nil
}
