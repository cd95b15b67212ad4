package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/nats"
)

// natsAckWait is the demo's NATS AckWait: a dead worker's messages come
// back after it (the server does not return a dead client's pulls), with
// NumDelivered raised.
const natsAckWait = 2 * time.Second

// natsBackend is the demo's NATS JetStream server: --url when it is a
// nats:// or tls:// URL, else the machine's (nats.DefaultURL).
type natsBackend struct {
	url string
	tr  *nats.Transport
}

// natsURL is the server of --url: a nats:// or tls:// URL as given, else
// (--url's AMQP default) nats.DefaultURL.
func natsURL(url string) string {
	if strings.HasPrefix(url, "nats://") || strings.HasPrefix(url, "tls://") {
		return url
	}
	return nats.DefaultURL
}

// openNATSBackend connects to conn's NATS server.
func openNATSBackend(conn connection) (*natsBackend, error) {
	s := &natsBackend{url: natsURL(conn.url)}
	secs := int(natsAckWait / time.Second)
	tr, err := nats.Open(brokers.NATSOptions(config.Config{NATSURL: s.url, NATSAckWaitSeconds: &secs}))
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	s.tr = tr
	return s, nil
}

// Close closes the connection.
func (s *natsBackend) Close() { s.tr.Close() }

// where describes the server for the demo's first line.
func (s *natsBackend) where() string { return "NATS JetStream (" + s.url + ")" }
