package lily

import (
	"fmt"
	"regexp"
)

// ShareGroupDeliveryLimit is the default delivery_limit of a queue
// consumed through a Kafka share group: one below the broker's default
// group.share.delivery.count.limit (5), so that Lily dead-letters a
// crash-type poison message (with evidence) before the broker archives it
// (silently, without a copy anywhere).
const ShareGroupDeliveryLimit = DefaultBrokerShareDeliveryLimit - 1

// DefaultBrokerShareDeliveryLimit is Kafka's default
// group.share.delivery.count.limit: the most deliveries of a record in a
// share group before the broker archives it.
const DefaultBrokerShareDeliveryLimit = 5

// kafkaGroupID is what Lily accepts as a share group name: Kafka allows
// any string, Lily what fits in a config file and a metric label.
var kafkaGroupID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// defaultDeliveryLimit is the delivery_limit of the queue when it sets
// none.
func (c QueueConfig) defaultDeliveryLimit() int {
	if c.KafkaShareGroup != "" {
		return ShareGroupDeliveryLimit
	}
	return DefaultDeliveryLimit
}

// validateShareGroup reports the problems of kafka_share_group: a share
// group exists only on Kafka, keeps no per-key order (the broker hands a
// partition's records to several members at once), and needs a name
// Kafka and Lily accept.
func (c QueueConfig) validateShareGroup() []error {
	g := c.KafkaShareGroup
	if g == "" {
		return nil
	}
	var errs []error
	if c.Transport != TransportKafka {
		errs = append(errs, fmt.Errorf("%w: queue %q: kafka_share_group = %q: the queue's transport is %q; share groups exist only on Kafka (set transport = \"kafka\", or remove kafka_share_group)",
			ErrInvalidConfig, c.Name, g, c.Transport))
	}
	if !kafkaGroupID.MatchString(g) {
		errs = append(errs, fmt.Errorf("%w: queue %q: kafka_share_group = %q: must be 1..249 characters of letters, digits, '.', '_' or '-'",
			ErrInvalidConfig, c.Name, g))
	}
	if c.Ordering == OrderingBlock || c.Ordering == OrderingPark {
		errs = append(errs, fmt.Errorf("%w: queue %q: ordering = %q with kafka_share_group = %q: a share group keeps no per-key order (the broker hands one partition's records to every member at once, and a released record comes back behind later ones), so Lily cannot %s a key; "+
			"use a consumer group for an ordered queue (remove kafka_share_group), or set ordering = \"reorder\"",
			ErrInvalidConfig, c.Name, c.Ordering, g, c.Ordering))
	}
	return errs
}
