package demo

import (
	"fmt"
	"strings"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// Emulators start the in-process brokers of the demos that run on one:
// Kafka without --brokers (a consumer group or a share group), SQS without
// an http(s) --url, and Pub/Sub. Each listens on a local TCP port for as
// long as the demo's process lives, so that its worker processes reach it
// like any broker. The lily binary passes none, so that it links no
// emulator; cmd/lily-demo passes its own.
type Emulators interface {
	// Kafka starts a one-broker Kafka cluster with the given broker
	// configurations and returns its seed brokers (host:port).
	Kafka(brokerConfigs map[string]string) (brokers []string, stop func(), err error)
	// SQS starts an SQS endpoint that speaks the Query protocol and
	// returns its URL.
	SQS() (url string, stop func(), err error)
	// PubSub starts a Pub/Sub fake.
	PubSub() (PubSubFake, error)
}

// PubSubFake is an in-process Pub/Sub service.
type PubSubFake interface {
	// Addr is its gRPC address, host:port.
	Addr() string
	// Unacked counts the messages published to the topics that match
	// accepts (by full name, projects/P/topics/T) and not acknowledged
	// yet: the Pub/Sub API has no such count, and the ledger needs one.
	Unacked(match func(topic string) bool) int64
	Close()
}

// lilyDemo is the command that runs the demos on in-process brokers.
const lilyDemo = "go run ./cmd/lily-demo"

// emulated names the in-process broker a connection needs, "" for none:
// Kafka without brokers, SQS without an http(s) endpoint, Pub/Sub without
// the parent's fake (a worker is given its address).
func (c connection) emulated() string {
	switch c.kind {
	case lily.TransportKafka:
		if strings.TrimSpace(c.brokers) == "" {
			return "Kafka (kfake)"
		}
	case lily.TransportSQS:
		if !isHTTP(c.url) {
			return "SQS emulator (goaws)"
		}
	case lily.TransportPubSub:
		if c.pubsubEndpoint == "" {
			return "Pub/Sub fake (pstest)"
		}
	}
	return ""
}

// errNoEmulator is what a connection that needs an in-process broker gets
// from a command without Emulators.
func (c connection) errNoEmulator() error {
	return usagef("--transport %s: the demo needs an in-process %s, which this command does not have (the demo's parent passes its own to its workers)", c.kind, c.emulated())
}

// checkEmulators refuses, before anything is created, a demo that needs an
// in-process broker when the command has none (the lily binary), naming
// the flag, the value and the two ways out: lily-demo, or a real broker.
func (f Flags) checkEmulators() error {
	need := f.conn().emulated()
	if f.em != nil || need == "" {
		return nil
	}
	fix := lilyDemo + " --transport " + f.transport
	if f.shareGroup != "" {
		fix += " --share-group " + f.shareGroup
	}
	if f.scenario != "" && f.scenario != "poison" {
		fix += " --scenario " + f.scenario
	}
	const why = "lily links no broker emulator"
	switch f.transport {
	case lily.TransportKafka:
		return usagef("demo: --transport kafka without --brokers: the demo would start an in-process %s, and %s; run '%s' (the demo on an in-process Kafka), or give --brokers host:port,... of your cluster",
			need, why, fix)
	case lily.TransportSQS:
		given := "without --url"
		if f.url != config.DefaultRabbitMQURL {
			given = fmt.Sprintf("with --url %q (not http(s)://...)", f.url)
		}
		return usagef("demo: --transport sqs %s: the demo would start an in-process %s, and %s; run '%s' (the demo on an in-process SQS), or give --url https://sqs.<region>.amazonaws.com (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
			given, need, why, fix)
	default:
		return usagef("demo: --transport %s: the demo runs Pub/Sub on an in-process %s only, and %s; run '%s'", f.transport, need, why, fix)
	}
}

// isHTTP reports whether u is an http(s) URL: an SQS endpoint, not the
// AMQP default of --url.
func isHTTP(u string) bool {
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")
}
