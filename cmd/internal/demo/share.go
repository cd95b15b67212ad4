package demo

import (
	"errors"
	"fmt"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport/kafka"
)

// The demo on a Kafka share group (--transport kafka --share-group NAME):
// the demo queue's topic is consumed by share group NAME, so the broker
// counts the deliveries (a crashed worker's records come back with their
// count raised) and Lily's attempts topic is not used; the retry topics
// are still consumed by the consumer group lily.<queue>. The queue's
// delivery_limit is lily.ShareGroupDeliveryLimit (4, QueueConfig), below
// the broker's default group.share.delivery.count.limit (5): Lily
// dead-letters a crashing order on its 5th delivery, before the broker
// would archive it.

// ShareBrokerConfigs are the share-group settings the demo asks of its
// in-process Kafka (Emulators.Kafka), and the tests of a cluster like it.
// The delivery limit and the lock stay Kafka's defaults (5 and 30 s, what
// the queue's delivery_limit and kafka.Options.ShareLockDuration assume).
// A worker killed by a crashing order leaves the share group only when its
// session times out — until then the group keeps some partitions assigned
// to it, and the restarted worker does not fetch them — so heartbeats are
// frequent and the session short (Kafka's default is 45 s, and its
// group.share.min.session.timeout.ms keeps it so on a real cluster).
var ShareBrokerConfigs = map[string]string{
	"group.share.heartbeat.interval.ms": "200",
	"group.share.session.timeout.ms":    "6000",
}

// validateShareGroup reports what is wrong with --share-group: a share
// group needs --transport kafka and the poison scenario (the ordering
// scenario parks keys, which a share group cannot keep in order; the
// outage scenario runs on a consumer group), and a name Kafka and Lily
// accept.
func (f Flags) validateShareGroup() error {
	g := f.shareGroup
	if g == "" {
		return nil
	}
	switch {
	case f.transport != lily.TransportKafka:
		return fmt.Errorf("--share-group %q with --transport %s: share groups exist only on Kafka; use --transport kafka --share-group %s, or drop --share-group",
			g, f.transport, g)
	case f.scenario != "" && f.scenario != "poison":
		return fmt.Errorf("--share-group %q with --scenario %s: only the poison scenario runs on a share group (a share group keeps no per-key order, and the outage scenario shows the breaker on a consumer group); drop --share-group or --scenario",
			g, f.scenario)
	}
	q := lily.QueueConfig{Name: DefaultQueue, Transport: lily.TransportKafka, KafkaShareGroup: g}.WithDefaults()
	if err := q.Validate(); err != nil {
		var inv interface{ Unwrap() []error }
		if errors.As(err, &inv) && len(inv.Unwrap()) > 0 {
			err = inv.Unwrap()[0]
		}
		return fmt.Errorf("--share-group %q: %w", g, err)
	}
	return nil
}

// shareWhere describes the share group for the demo's first line.
func shareWhere(group string) string {
	if group == "" {
		return ""
	}
	return fmt.Sprintf(", consumed by share group %s (broker-counted deliveries; %s default %d)",
		group, kafka.BrokerShareDeliveryLimit, lily.DefaultBrokerShareDeliveryLimit)
}
