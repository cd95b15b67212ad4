package lint

import (
	"fmt"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// Codes of the Kafka share-group findings.
const (
	// CodeShareDeliveryLimit (error): a kafka queue consumed through a
	// share group (kafka_share_group) has a delivery_limit that is not
	// below the share group's delivery limit (the group's
	// share.delivery.count.limit, else the brokers'
	// group.share.delivery.count.limit, else Kafka's default 5): the
	// broker archives a record that keeps crashing its consumer before
	// Lily dead-letters it. Statically the limit is Kafka's default; with
	// --live it is read from the cluster.
	CodeShareDeliveryLimit = "share-delivery-limit"
	// CodeShareLockShort (warning, --live): the share group's acquisition
	// lock (share.record.lock.duration.ms, else the brokers'
	// group.share.record.lock.duration.ms) is shorter than the lock Lily
	// assumes (kafka.Options.ShareLockDuration, 30 s by default), from
	// which it times its renewals.
	CodeShareLockShort = "share-lock-short"
)

// The share-group settings a share-delivery-limit finding names: the
// brokers' bound and a group's own (transport/kafka's
// BrokerShareDeliveryLimit and GroupShareDeliveryLimit; lint links no
// Kafka client, and livelint's tests check that the names agree).
const (
	brokerShareDeliveryLimit = "group.share.delivery.count.limit"
	groupShareDeliveryLimit  = "share.delivery.count.limit"
)

// WhyShareDeliveryLimit is the why of a share-delivery-limit finding,
// static or live: how a delivery_limit at or above the share group's
// limit loses messages.
const WhyShareDeliveryLimit = "a share group counts deliveries on the broker and archives a record at its delivery limit: the record is " +
	"never delivered again and no copy is written anywhere — no dead letter, no evidence, no alarm (the silent loss of " +
	"seed 000). Lily dead-letters a crash-type poison record (with evidence, to <topic>.dlt) on its delivery number " +
	"delivery_limit + 1, without calling the handler; that delivery only comes while delivery_limit is below the group's " +
	"limit. Lily's consumer refuses such a queue when it starts (it reads the limit from the cluster), and the ledger " +
	"counts an archived record as lost"

// kafkaShareStatic reports the share-group queues whose delivery_limit is
// not below Kafka's default archive limit
// (lily.DefaultBrokerShareDeliveryLimit).
func kafkaShareStatic(cfg config.Config) []Finding {
	var out []Finding
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportKafka || q.KafkaShareGroup == "" {
			continue
		}
		dl, limit := q.Settings().DeliveryLimit, lily.DefaultBrokerShareDeliveryLimit
		if dl < limit {
			continue
		}
		out = append(out, Finding{Severity: Error, Queue: q.Name, Code: CodeShareDeliveryLimit,
			What: fmt.Sprintf("delivery_limit = %d with kafka_share_group = %q is not below Kafka's default share-group delivery limit %d (%s)",
				dl, q.KafkaShareGroup, limit, brokerShareDeliveryLimit),
			Why: WhyShareDeliveryLimit,
			Fix: fmt.Sprintf("set delivery_limit to at most %d (leave it unset for %d), or raise %s on the brokers (or %s on share group %s) "+
				"above %d and confirm with 'lily lint --live'", limit-1, lily.ShareGroupDeliveryLimit, brokerShareDeliveryLimit,
				groupShareDeliveryLimit, q.KafkaShareGroup, dl)})
	}
	return out
}
