package brokers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/transport/rabbitmq"
)

// RabbitMQConnectTimeout bounds how long OpenRabbitMQ waits for the broker.
const RabbitMQConnectTimeout = 10 * time.Second

// OpenRabbitMQ connects to RabbitMQ, failing after RabbitMQConnectTimeout
// instead of retrying forever.
func OpenRabbitMQ(ctx context.Context, o rabbitmq.Options) (*rabbitmq.Transport, error) {
	ctx, cancel := context.WithTimeout(ctx, RabbitMQConnectTimeout)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ (check --url or the config's rabbitmq_url): %w", err)
	}
	return tr, nil
}

// RabbitMQ returns the set's RabbitMQ transport, connecting on first use.
// It counts in flight through the management API (what the broker holds
// for every consumer, in every process): rabbitmq_management_url, else
// derived from the AMQP URL (port 15672).
func (s *Set) RabbitMQ(ctx context.Context) (*rabbitmq.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rmq == nil {
		mgmt, err := rabbitmq.ManagementFor(s.url)
		if err != nil {
			return nil, err
		}
		if s.cfg.RabbitMQManagementURL != "" {
			mgmt.URL = strings.TrimRight(s.cfg.RabbitMQManagementURL, "/")
		}
		rmq, err := OpenRabbitMQ(ctx, rabbitmq.Options{URL: s.url, Management: mgmt})
		if err != nil {
			return nil, err
		}
		s.rmq = rmq
	}
	return s.rmq, nil
}
