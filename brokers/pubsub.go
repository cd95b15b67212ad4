package brokers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/pubsub"
)

// PubSubConnectTimeout bounds how long a Set waits for Pub/Sub.
const PubSubConnectTimeout = 10 * time.Second

// PubSubOptions are the transport options of a configuration's Pub/Sub
// settings.
func PubSubOptions(c config.Config) pubsub.Options {
	o := pubsub.Options{Project: c.PubSubProject, Endpoint: c.PubSubEndpoint, Insecure: c.PubSubInsecure,
		AckDeadline: time.Duration(c.PubSubAckDeadline()) * time.Second, Queues: map[string]pubsub.QueueNames{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if c.PubSubMaxDeliveryAttempts != nil {
		o.MaxDeliveryAttempts = *c.PubSubMaxDeliveryAttempts
	}
	for q, n := range c.PubSubQueues {
		o.Queues[q] = pubsub.QueueNames{Topic: n.Topic, Subscription: n.Subscription}
	}
	return o
}

// PubSub returns the set's Pub/Sub transport, connecting on first use
// (failing after PubSubConnectTimeout).
func (s *Set) PubSub(ctx context.Context) (*pubsub.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil {
		ctx, cancel := context.WithTimeout(ctx, PubSubConnectTimeout)
		defer cancel()
		ps, err := pubsub.Open(ctx, PubSubOptions(s.cfg))
		if err != nil {
			return nil, fmt.Errorf("connect to Pub/Sub (check pubsub_project, pubsub_endpoint and the credentials): %w", err)
		}
		s.ps = ps
	}
	return s.ps, nil
}
