package livelint

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/kafka"
)

// ShareLockAssumed is the acquisition lock 'lily' assumes for a share
// group: the default of kafka.Options.ShareLockDuration (Kafka's default
// group.share.record.lock.duration.ms).
const ShareLockAssumed = 30 * time.Second

// KafkaState is what the Kafka live checks read from the cluster.
type KafkaState struct {
	// Topics maps each kafka queue to its dead-letter topic.
	Topics map[string]string
	// TopicConfigs maps a kafka queue to its dead-letter topic's configs,
	// for the topics that could be read.
	TopicConfigs map[string]map[string]string
	// Shares maps a queue with kafka_share_group to its share group's
	// settings, for the groups that could be read.
	Shares map[string]kafka.ShareSettings
	// Notes say what could not be read, and so is not judged live (a
	// share group's queue keeps the static finding, against Kafka's
	// default limit): "orders.dlt: ... (not judged)".
	Notes []string
}

// ReadKafka reads through k the dead-letter topic configs of the
// configuration's kafka queues and the share-group settings of those with
// kafka_share_group. It only reads. What it cannot read is noted, not an
// error: a missing topic is 'lily topology verify's to report.
func ReadKafka(ctx context.Context, cfg config.Config, k *kafka.Transport) KafkaState {
	st := KafkaState{Topics: map[string]string{}, TopicConfigs: map[string]map[string]string{}, Shares: map[string]kafka.ShareSettings{}}
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportKafka {
			continue
		}
		st.Topics[q.Name] = k.DeadLetterTopicOf(q.Name)
		tc, err := k.TopicConfigs(ctx, st.Topics[q.Name])
		if err != nil {
			st.Notes = append(st.Notes, fmt.Sprintf("%s: %v (not judged)", st.Topics[q.Name], err))
			continue
		}
		st.TopicConfigs[q.Name] = tc
	}
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportKafka || q.KafkaShareGroup == "" {
			continue
		}
		s, err := k.ShareSettings(ctx, q.KafkaShareGroup)
		if err != nil {
			st.Notes = append(st.Notes, fmt.Sprintf("share group %s of %s: %v (judged against Kafka's default limit only)", q.KafkaShareGroup, q.Name, err))
			continue
		}
		st.Shares[q.Name] = s
	}
	return st
}

// CheckKafka judges what ReadKafka read: the dead-letter topics' retention
// (KafkaDLT) and the share groups (KafkaShare, against the lock assumed).
func CheckKafka(cfg config.Config, st KafkaState, assumed time.Duration) []lint.Finding {
	return append(KafkaDLT(cfg, st.Topics, st.TopicConfigs), KafkaShare(cfg, st.Shares, assumed)...)
}

// KafkaDLT judges the dead-letter topics as the cluster has them:
// configs maps a kafka queue to its dead-letter topic's name and configs
// (as kafka.Transport.TopicConfigs reads them); a queue missing from it
// is not judged. A retention.ms of -1, or longer than the queue's
// dlq_retention_hours, is a warning.
func KafkaDLT(cfg config.Config, topics map[string]string, configs map[string]map[string]string) []lint.Finding {
	var out []lint.Finding
	for _, q := range cfg.Queues {
		tc, ok := configs[q.Name]
		if q.Transport != lily.TransportKafka || !ok {
			continue
		}
		catalog := time.Duration(q.Settings().DLQRetentionHours) * time.Hour
		raw := tc["retention.ms"]
		ms, err := strconv.ParseInt(raw, 10, 64)
		var what string
		switch {
		case err != nil:
			continue // not reported by the cluster: nothing to judge
		case ms < 0:
			what = fmt.Sprintf("topic %s keeps records forever (retention.ms = %s)", topics[q.Name], raw)
		case time.Duration(ms)*time.Millisecond > catalog:
			what = fmt.Sprintf("topic %s keeps records %s (retention.ms = %s), longer than dlq_retention_hours = %d",
				topics[q.Name], time.Duration(ms)*time.Millisecond, raw, q.Settings().DLQRetentionHours)
		default:
			continue
		}
		out = append(out, lint.Finding{Severity: lint.Warning, Queue: q.Name, Code: lint.CodeDLTOutlivesCatalog, What: what, Why: lint.WhyDLTOutlivesCatalog,
			Fix: "'lily topology apply' sets the retention the configuration declares (kafka_dlt_retention_hours, default dlq_retention_hours)"})
	}
	return out
}

// KafkaShare judges the share groups as the cluster has them: settings
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
func KafkaShare(cfg config.Config, settings map[string]kafka.ShareSettings, assumed time.Duration) []lint.Finding {
	if assumed <= 0 {
		assumed = ShareLockAssumed
	}
	var out []lint.Finding
	for _, q := range cfg.Queues {
		s, ok := settings[q.Name]
		if q.Transport != lily.TransportKafka || q.KafkaShareGroup == "" || !ok {
			continue
		}
		g := q.KafkaShareGroup
		if dl := q.Settings().DeliveryLimit; dl >= s.DeliveryLimit {
			out = append(out, lint.Finding{Severity: lint.Error, Queue: q.Name, Code: lint.CodeShareDeliveryLimit,
				What: fmt.Sprintf("delivery_limit = %d is not below share group %s's delivery limit %d (%s)",
					dl, g, s.DeliveryLimit, shareSource(s.DeliveryLimitSource, g, kafka.GroupShareDeliveryLimit, kafka.BrokerShareDeliveryLimit)),
				Why: lint.WhyShareDeliveryLimit,
				Fix: fmt.Sprintf("set delivery_limit to at most %d, or raise %s above %d (%s on share group %s wins over the brokers' %s)",
					s.DeliveryLimit-1, shareSetting(s.DeliveryLimitSource, kafka.GroupShareDeliveryLimit, kafka.BrokerShareDeliveryLimit), dl,
					kafka.GroupShareDeliveryLimit, g, kafka.BrokerShareDeliveryLimit)})
		}
		if s.LockDuration < assumed {
			out = append(out, lint.Finding{Severity: lint.Warning, Queue: q.Name, Code: lint.CodeShareLockShort,
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
// KafkaShare, which knows the real limit).
func WithoutStaticShare(findings []lint.Finding, judged map[string]kafka.ShareSettings) []lint.Finding {
	var out []lint.Finding
	for _, f := range findings {
		if _, ok := judged[f.Queue]; ok && f.Code == lint.CodeShareDeliveryLimit {
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
