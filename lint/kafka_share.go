package lint

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/kafka"
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

// ShareLockAssumed is the acquisition lock 'lily' assumes for a share
// group: the default of kafka.Options.ShareLockDuration (Kafka's default
// group.share.record.lock.duration.ms).
const ShareLockAssumed = 30 * time.Second

// shareWhy is why a delivery_limit at or above the share group's limit
// loses messages.
const shareWhy = "a share group counts deliveries on the broker and archives a record at its delivery limit: the record is " +
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
				dl, q.KafkaShareGroup, limit, kafka.BrokerShareDeliveryLimit),
			Why: shareWhy,
			Fix: fmt.Sprintf("set delivery_limit to at most %d (leave it unset for %d), or raise %s on the brokers (or %s on share group %s) "+
				"above %d and confirm with 'lily lint --live'", limit-1, lily.ShareGroupDeliveryLimit, kafka.BrokerShareDeliveryLimit,
				kafka.GroupShareDeliveryLimit, q.KafkaShareGroup, dl)})
	}
	return out
}

// KafkaShareLive judges the share groups as the cluster has them: settings
// maps a share-group queue to its group's settings (as
// kafka.Transport.ShareSettings reads them); a queue missing from it is
// not judged. delivery_limit at or above the group's delivery limit is an
// error (share-delivery-limit, naming where the limit came from: "group",
// "broker" or "default"); a lock shorter than assumed (the lock Lily
// times its renewals from; ShareLockAssumed by default) is a warning
// (share-lock-short).
//
// The live finding replaces the static share-delivery-limit finding of the
// same queue, which judges against Kafka's default: use
// WithoutStaticShare on the static findings of the queues in settings.
func KafkaShareLive(cfg config.Config, settings map[string]kafka.ShareSettings, assumed time.Duration) []Finding {
	if assumed <= 0 {
		assumed = ShareLockAssumed
	}
	var out []Finding
	for _, q := range cfg.Queues {
		s, ok := settings[q.Name]
		if q.Transport != lily.TransportKafka || q.KafkaShareGroup == "" || !ok {
			continue
		}
		g := q.KafkaShareGroup
		if dl := q.Settings().DeliveryLimit; dl >= s.DeliveryLimit {
			out = append(out, Finding{Severity: Error, Queue: q.Name, Code: CodeShareDeliveryLimit,
				What: fmt.Sprintf("delivery_limit = %d is not below share group %s's delivery limit %d (%s)",
					dl, g, s.DeliveryLimit, shareSource(s.DeliveryLimitSource, g, kafka.GroupShareDeliveryLimit, kafka.BrokerShareDeliveryLimit)),
				Why: shareWhy,
				Fix: fmt.Sprintf("set delivery_limit to at most %d, or raise %s above %d (%s on share group %s wins over the brokers' %s)",
					s.DeliveryLimit-1, shareSetting(s.DeliveryLimitSource, kafka.GroupShareDeliveryLimit, kafka.BrokerShareDeliveryLimit), dl,
					kafka.GroupShareDeliveryLimit, g, kafka.BrokerShareDeliveryLimit)})
		}
		if s.LockDuration < assumed {
			out = append(out, Finding{Severity: Warning, Queue: q.Name, Code: CodeShareLockShort,
				What: fmt.Sprintf("share group %s's acquisition lock is %s (%s), shorter than the %s Lily assumes",
					g, s.LockDuration, shareSource(s.LockDurationSource, g, kafka.GroupShareLockDuration, kafka.BrokerShareLockDuration), assumed),
				Why: fmt.Sprintf("Lily renews (RENEW) the records it holds every fifth of the lock it assumes, every %s; a lock of %s can run out "+
					"between renewals: the broker then hands the record to another member while its handler still runs (a duplicate), "+
					"raises its delivery count, and refuses the first member's acknowledgement — slow handlers walk innocent records "+
					"towards the delivery limit", assumed/5, s.LockDuration),
				Fix: fmt.Sprintf("raise %s to at least %d ms, or set kafka.Options.ShareLockDuration to %s in the program that consumes the queue",
					shareSetting(s.LockDurationSource, kafka.GroupShareLockDuration, kafka.BrokerShareLockDuration), assumed.Milliseconds(), s.LockDuration)})
		}
	}
	return out
}

// WithoutStaticShare returns findings without the share-delivery-limit
// findings of the queues in judged (judged on the cluster by
// KafkaShareLive, which knows the real limit).
func WithoutStaticShare(findings []Finding, judged map[string]kafka.ShareSettings) []Finding {
	var out []Finding
	for _, f := range findings {
		if _, ok := judged[f.Queue]; ok && f.Code == CodeShareDeliveryLimit {
			continue
		}
		out = append(out, f)
	}
	return out
}

// shareSource says where a share-group setting came from: "share group
// g's share.delivery.count.limit", "the brokers'
// group.share.delivery.count.limit" or "Kafka's default".
func shareSource(src, group, groupKey, brokerKey string) string {
	switch src {
	case "group":
		return fmt.Sprintf("source group: share group %s's %s", group, groupKey)
	case "broker":
		return fmt.Sprintf("source broker: the brokers' %s", brokerKey)
	}
	return fmt.Sprintf("source default: Kafka's default, the cluster reports no %s", brokerKey)
}

// shareSetting is the setting to change: the group's when it set the
// value, else the brokers'.
func shareSetting(src, groupKey, brokerKey string) string {
	if src == "group" {
		return groupKey + " on the share group"
	}
	return brokerKey + " on the brokers"
}
