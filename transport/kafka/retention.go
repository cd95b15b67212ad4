package kafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/lily-mq/lily/transport"
)

// DefaultDLTRetentionMillis is how long a dead-letter topic keeps its
// records when nothing else is said: 336 hours, dlq_retention_hours'
// default, so that a dead letter leaves the topic when the catalog would
// discard it.
const DefaultDLTRetentionMillis int64 = 336 * 3600 * 1000

// maxDLTSegmentMillis bounds the dead-letter topic's segment.ms: Kafka
// deletes whole closed segments, so a record lives up to its retention
// plus one segment. Hourly segments keep that surplus to an hour.
const maxDLTSegmentMillis int64 = 3600 * 1000

// DLTRetention is the end of life of a queue's dead-letter topic: dead
// letters hold personal data, and once ingested the catalog holds the work
// list, so the topic keeps them no longer than the catalog would
// (retention.ms) and, if asked, no more than a size per partition
// (retention.bytes). Lily declares both, and segment.ms = min(retention,
// 1h) so that expired records really go.
type DLTRetention struct {
	// Millis is retention.ms, > 0. Defaults to DefaultDLTRetentionMillis
	// (the config sets it from the queue's dlq_retention_hours).
	Millis int64 `json:"retention_ms"`
	// Bytes is retention.bytes, the most bytes kept per partition; -1 is
	// no size cap. A cap deletes the oldest dead letters of a flooded
	// partition even before they are ingested (the ledger then shows them
	// lost). Defaults to -1.
	Bytes int64 `json:"retention_bytes"`
}

// WithDefaults fills the zero fields.
func (r DLTRetention) WithDefaults() DLTRetention {
	if r.Millis <= 0 {
		r.Millis = DefaultDLTRetentionMillis
	}
	if r.Bytes == 0 {
		r.Bytes = -1
	}
	return r
}

// Configs are the topic configs that declare r.
func (r DLTRetention) Configs() map[string]*string {
	r = r.WithDefaults()
	return map[string]*string{
		"retention.ms":    kadm.StringPtr(strconv.FormatInt(r.Millis, 10)),
		"retention.bytes": kadm.StringPtr(strconv.FormatInt(r.Bytes, 10)),
		"segment.ms":      kadm.StringPtr(strconv.FormatInt(min(r.Millis, maxDLTSegmentMillis), 10)),
	}
}

// PlanRetention is PlanWith with the dead-letter topic's retention r.
func PlanRetention(spec transport.QueueSpec, partitions int32, dlt string, r DLTRetention) []TopicPlan {
	out := PlanWith(spec, partitions, dlt)
	for i := range out {
		if out[i].Role == "dlt" {
			out[i].Configs = r.Configs()
		}
	}
	return out
}

// alignConfigs sets the configs of tp that an existing topic has
// otherwise (the dead-letter topic's retention is Lily's to declare).
func (t *Transport) alignConfigs(ctx context.Context, tp TopicPlan) error {
	have, err := t.TopicConfigs(ctx, tp.Name)
	if err != nil {
		return err
	}
	var alter []kadm.AlterConfig
	for key, want := range tp.Configs {
		if want != nil && !configMatches(key, *want, have[key]) {
			alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: want})
			t.opts.Logger.Info("kafka: set a config of an existing topic", "topic", tp.Name, "config", key, "from", have[key], "to", *want)
		}
	}
	if len(alter) == 0 {
		return nil
	}
	resp, err := t.adm.AlterTopicConfigs(ctx, alter, tp.Name)
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: set the retention of %s: %w", tp.Name, err)
	}
	return nil
}

// TopicConfigs returns the configs of topic as the cluster reports them
// (its own values and the broker's defaults); a topic that does not exist
// is transport.ErrUnknownQueue.
func (t *Transport) TopicConfigs(ctx context.Context, topic string) (map[string]string, error) {
	rcs, err := t.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe the configs of %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		if _, perr := t.Partitions(ctx, topic); perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("kafka: describe the configs of %s: %w", topic, err)
	}
	out := map[string]string{}
	for _, c := range rc.Configs {
		if c.Value != nil {
			out[c.Key] = *c.Value
		}
	}
	return out, nil
}

// DeadLetterTopicOf returns the dead-letter topic of queue: the one
// Options.DeadLetterTopics names, or <queue>.dlt.
func (t *Transport) DeadLetterTopicOf(queue string) string {
	if dt := t.opts.DeadLetterTopics[queue]; dt != "" {
		return dt
	}
	return DeadLetterTopic(queue)
}
