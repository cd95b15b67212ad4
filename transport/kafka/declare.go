package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily/transport"
)

// Publish produces the messages to the topic p.Queue, in order, with
// acks=all, and returns once the brokers confirmed all of them. The key
// picks the partition as the Java client does (murmur2). Messages for the
// queue's consumer alone (p.Direct: a redrive, redirect or release) go to
// its return topic instead (ReturnTopic, read by its consumer group
// alone), same key so same partition number; a redriven dead letter of
// Spring Kafka, Kafka Connect or Kafka Streams to the origin topic's
// return topic, in the partition its evidence names, and only when the
// group that failed is Lily's (directRecord). A redrive that is not
// Direct goes to the origin topic (redriveRecord). The event ID
// and type travel as x-lily-event-id and x-lily-type; headers keep their
// types (see EncodeHeaders). A topic that does not exist is
// transport.ErrUnknownQueue.
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	if len(p.Messages) == 0 {
		return nil
	}
	if t.isClosed() {
		return errClosed
	}
	if _, err := t.partitions(ctx, p.Queue); err != nil {
		return fmt.Errorf("kafka: publish to %s: %w", p.Queue, err)
	}
	recs := make([]*kgo.Record, len(p.Messages))
	for i, m := range p.Messages {
		if m.EventID == "" {
			return fmt.Errorf("kafka: publish to %s: message %d has no event ID", p.Queue, i)
		}
		hs, err := messageHeaders(m, nil)
		if err != nil {
			return fmt.Errorf("kafka: publish to %s: message %s: %w", p.Queue, m.EventID, err)
		}
		recs[i] = &kgo.Record{Topic: p.Queue, Value: m.Body, Headers: hs}
		if m.Key != "" {
			recs[i].Key = []byte(m.Key)
		}
		if p.Direct {
			if err := t.directRecord(ctx, p.Queue, p.Redrive, m, recs[i]); err != nil {
				what := "redirect"
				if p.Redrive {
					what = "redrive"
				}
				return fmt.Errorf("kafka: %s to %s: %w", what, p.Queue, err)
			}
		} else if p.Redrive {
			if err := t.redriveRecord(ctx, p.Queue, m, recs[i]); err != nil {
				return fmt.Errorf("kafka: redrive to %s: %w", p.Queue, err)
			}
		}
	}
	if err := errors.Join(t.produce(ctx, recs)...); err != nil {
		return fmt.Errorf("kafka: publish to %s: %w", p.Queue, err)
	}
	return nil
}

// TopicPlan is one topic Declare creates.
type TopicPlan struct {
	// Name of the topic.
	Name string `json:"name"`
	// Role is "main", "retry", "dlt" or "attempts".
	Role string `json:"role"`
	// Partitions is the partition count.
	Partitions int32 `json:"partitions"`
	// Configs are the topic configs Lily sets (others are the broker's
	// defaults).
	Configs map[string]*string `json:"configs,omitempty"`
}

// Plan returns the topics of a queue: the main topic, one retry topic per
// bucket and the return topic (ReturnTopic, the retry topic of no delay),
// the dead-letter topic (with the default DLTRetention: its
// records end when the catalog's would; PlanRetention sets another) and
// the attempts topic (compacted, hourly segments), each with partitions
// partitions.
func Plan(spec transport.QueueSpec, partitions int32) []TopicPlan {
	out := []TopicPlan{{Name: spec.Name, Role: "main", Partitions: partitions}}
	for _, ms := range topicBuckets(spec) {
		out = append(out, TopicPlan{Name: RetryTopic(spec.Name, ms), Role: "retry", Partitions: partitions})
	}
	out = append(out,
		TopicPlan{Name: DeadLetterTopic(spec.Name), Role: "dlt", Partitions: partitions,
			Configs: DLTRetention{}.Configs()},
		TopicPlan{Name: AttemptsTopic(spec.Name), Role: "attempts", Partitions: partitions,
			Configs: map[string]*string{"cleanup.policy": kadm.StringPtr("compact"),
				// Roll segments hourly: the active segment is never
				// compacted, and a short one keeps the tail read short.
				"segment.ms": kadm.StringPtr("3600000")}},
	)
	return out
}

// topicBuckets are the delays of the queue's retry topics: its buckets
// and 0 — the return topic (ReturnTopic), through which redrives and
// share-group give-backs reach the queue's consumer group alone.
func topicBuckets(spec transport.QueueSpec) []int64 {
	if slices.Contains(spec.BucketsMillis, 0) {
		return spec.BucketsMillis
	}
	return append(slices.Clone(spec.BucketsMillis), 0)
}

// PlanWith is Plan with the dead-letter topic named dlt (e.g. one written
// by Spring Kafka) instead of <queue>.dlt; an empty dlt keeps the default.
func PlanWith(spec transport.QueueSpec, partitions int32, dlt string) []TopicPlan {
	out := Plan(spec, partitions)
	if dlt != "" {
		for i := range out {
			if out[i].Role == "dlt" {
				out[i].Name = dlt
			}
		}
	}
	return out
}

// plan is the queue's Plan with its dead-letter topic as
// Options.DeadLetterTopics names it and Options.DeadLetterRetention says.
func (t *Transport) plan(spec transport.QueueSpec, partitions int32) []TopicPlan {
	return PlanRetention(spec, partitions, t.opts.DeadLetterTopics[spec.Name], t.opts.DeadLetterRetention[spec.Name])
}

// Declare creates the topics of each queue (Plan) that do not exist yet
// and registers the specs. When the main topic exists, its partition
// count is used for the others, so that a retry or dead-letter copy keeps
// its partition number. Existing topics are left as they are, but for the
// dead-letter topic's retention (retention.ms, retention.bytes,
// segment.ms), which is set to what the plan says.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	for _, spec := range p.Queues {
		if spec.Name == "" {
			return errors.New("kafka: declare: a queue needs a name")
		}
		parts := t.opts.Partitions
		if n, err := t.partitions(ctx, spec.Name); err == nil {
			parts = n
		}
		plan := t.plan(spec, parts)
		var existed, created []string
		for _, tp := range plan {
			resp, err := t.adm.CreateTopic(ctx, tp.Partitions, t.opts.ReplicationFactor, tp.Configs, tp.Name)
			if errors.Is(err, kerr.TopicAlreadyExists) {
				existed = append(existed, tp.Name)
				if tp.Role == "dlt" {
					if err := t.alignConfigs(ctx, tp); err != nil {
						return err
					}
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("kafka: create topic %s: %w", tp.Name, err)
			}
			if resp.NumPartitions > 0 {
				t.mu.Lock()
				t.topics[tp.Name] = resp.NumPartitions
				t.mu.Unlock()
			}
			created = append(created, tp.Name)
		}
		if err := t.refreshMetadata(ctx, created); err != nil {
			return err
		}
		if spec.ShareGroup != "" {
			if err := t.ensureShareGroup(ctx, spec.ShareGroup); err != nil {
				return err
			}
		}
		for _, name := range existed {
			if n, err := t.partitions(ctx, name); err == nil && n != parts {
				t.opts.Logger.Warn("kafka: topic has another partition count than its queue's main topic: copies land in partition number mod its count, not the original's number",
					"topic", name, "partitions", n, "main", spec.Name, "main_partitions", parts)
			}
		}
	}
	t.register(p.Queues...)
	return nil
}

// refreshMetadata replaces the client's cached metadata of topics just
// created. The probe above, made before they existed, is cached as
// "unknown topic" for MetadataMinAge (250 ms here, 5 s by default), and
// every admin request that reads the cache (end offsets, depth) would
// fail with UNKNOWN_TOPIC_OR_PARTITION until it expires.
func (t *Transport) refreshMetadata(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	// A limit of 1 ns makes every named topic's cache entry stale.
	if _, err := t.prod.RequestCachedMetadata(ctx, req, time.Nanosecond); err != nil {
		return fmt.Errorf("kafka: metadata of created topics %v: %w", topics, err)
	}
	return nil
}

// DeleteTopics deletes the topics of the specs (for tests and teardown).
func (t *Transport) DeleteTopics(ctx context.Context, specs ...transport.QueueSpec) error {
	var names []string
	for _, s := range specs {
		for _, tp := range Plan(s, 1) {
			names = append(names, tp.Name)
		}
	}
	resp, err := t.adm.DeleteTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("kafka: delete topics: %w", err)
	}
	t.forget(names...)
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("kafka: delete topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// retryTopics returns the queue's retry topics: those of its registered
// spec, and any other "<queue>.retry.<ms>ms" topic the cluster has (a
// bucket removed from the configuration may still hold copies).
func (t *Transport) retryTopics(ctx context.Context, queue string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	if s, ok := t.spec(queue); ok {
		for _, ms := range topicBuckets(s) {
			seen[RetryTopic(queue, ms)] = true
		}
	}
	td, err := t.adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	for name := range td {
		if q, _, ok := ParseRetryTopic(name); ok && q == queue {
			seen[name] = true
		}
	}
	for name := range seen {
		if td.Has(name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// lag returns, over the topics, the records past the group's committed
// offsets (the log start where the group committed nothing).
func (t *Transport) lag(ctx context.Context, group string, topics ...string) (int64, error) {
	if len(topics) == 0 {
		return 0, nil
	}
	ends, err := t.adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	starts, err := t.adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	committed, err := t.adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return 0, fmt.Errorf("kafka: committed offsets of group %s: %w", group, err)
	}
	var n int64
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At > from {
			from = c.At
		}
		if e.Offset > from {
			n += e.Offset - from
		}
	})
	return n, nil
}

// InFlight counts the queue's records that are neither acknowledged nor
// dead-lettered: on the main topic and on every retry topic, the records
// past the group's committed offsets (records fetched and not committed,
// and those not fetched yet). While a retry or dead-letter copy is being
// handed off, its original is counted until its offset is committed, a
// moment after the copy was confirmed, so a message can be counted twice
// for that moment, never not at all. A share-group queue's main topic
// counts the share-partition lag instead (InFlightParts).
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	p, err := t.InFlightParts(ctx, queue)
	return p.Ready + p.Retrying, err
}
