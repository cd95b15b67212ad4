package main

import (
	"fmt"
	"sync"

	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
)

// emulators are the in-process brokers of lily-demo: franz-go's kfake,
// the SQS emulator goaws (transport/sqs/sqstest) and the Pub/Sub SDK's
// pstest. They are test machinery, which is why they live in this command
// and not in lily.
type emulators struct{}

var _ demo.Emulators = emulators{}

// Kafka starts a one-broker kfake cluster.
func (emulators) Kafka(brokerConfigs map[string]string) ([]string, func(), error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(brokerConfigs))
	if err != nil {
		return nil, nil, fmt.Errorf("kfake: %w", err)
	}
	return c.ListenAddrs(), c.Close, nil
}

// SQS starts goaws. There is one per process (goaws keeps its state in
// package globals): it lives as long as the process, and stop does
// nothing.
func (emulators) SQS() (string, func(), error) {
	e, err := sqstest.Start()
	if err != nil {
		return "", nil, err
	}
	return e.URL(), func() {}, nil
}

// PubSub starts a pstest server.
func (emulators) PubSub() (demo.PubSubFake, error) {
	return &pubsubFake{srv: pstest.NewServer()}, nil
}

// pubsubFake is a pstest server that counts its unacknowledged messages.
type pubsubFake struct {
	srv *pstest.Server
	mu  sync.Mutex // serializes Unacked (pstest's records are shared)
}

func (p *pubsubFake) Addr() string { return p.srv.Addr }

// Unacked counts the messages of the matching topics with no ack.
func (p *pubsubFake) Unacked(match func(topic string) bool) int64 {
	// Server.Messages refreshes the Acks of the same *Message values it
	// returned before: concurrent counts must not read them meanwhile.
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, m := range p.srv.Messages() {
		if m.Acks == 0 && match(m.Topic) {
			n++
		}
	}
	return n
}

func (p *pubsubFake) Close() { p.srv.Close() }
