package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/pubsub"
)

// pubsubConnectTimeout bounds how long a command waits for Pub/Sub.
const pubsubConnectTimeout = 10 * time.Second

// pubsubOptions are the transport options of a configuration's Pub/Sub
// settings.
func pubsubOptions(c config.Config) pubsub.Options {
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

// pubsub connects, on first use, to the configuration's Pub/Sub project.
func (b *brokers) pubsub(ctx context.Context) (*pubsub.Transport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ps == nil {
		o := pubsubOptions(b.cfg)
		if b.psOptions != nil {
			b.psOptions(&o)
		}
		ctx, cancel := context.WithTimeout(ctx, pubsubConnectTimeout)
		defer cancel()
		ps, err := pubsub.Open(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("connect to Pub/Sub (check pubsub_project, pubsub_endpoint and the credentials): %w", err)
		}
		b.ps = ps
	}
	return b.ps, nil
}
