package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// errNoPathAlone means no Kafka topic reaches the failing consumer alone:
// it is a consumer group Lily does not run.
var errNoPathAlone = errors.New("no topic reaches that consumer group alone")

// origin is where a redriven message failed: a topic, perhaps a
// partition, and the consumer group when the evidence names one.
type origin struct {
	topic  string
	part   int32
	pinned bool
	group  string // "" when the evidence names none
	system string // the foreign system, "" for Lily's own dead letters
}

// redriveOrigin returns where a redriven message failed: the topic and
// partition named by the dead letter's foreign evidence — Spring Kafka's
// kafka_dlt-original-topic and kafka_dlt-original-partition (a 4-byte
// big-endian int), Kafka Connect's __connect.errors.topic and
// __connect.errors.partition (strings), Kafka Streams'
// __streams.errors.topic and __streams.errors.partition — with the failing
// consumer group (Spring's kafka_dlt-original-consumer-group; a Connect
// sink's "connect-<connector>", Kafka Connect's default); else queue, with
// no partition (the key picks it, as for Lily's own dead letters, which
// the DLT keeps on the key's partition).
func redriveOrigin(queue string, h transport.Headers) origin {
	for _, f := range evidence.DecodeForeign(h) {
		o := origin{topic: f.Source, part: f.Partition, pinned: f.HasPartition && f.Partition >= 0, system: f.System}
		switch f.System {
		case evidence.SystemSpringKafka:
			o.group = f.Consumer
		case evidence.SystemKafkaConnect:
			if f.Consumer != "" {
				o.group = "connect-" + f.Consumer
			}
		case evidence.SystemKafkaStreams:
		default:
			continue
		}
		if o.topic == "" {
			o.topic = queue
		}
		return o
	}
	return origin{topic: queue}
}

// ReturnTopic returns the topic through which a message reaches queue's
// consumer group alone: its retry topic of no delay, "<queue>.retry.0ms",
// which Declare creates for every queue and which only the group reads
// (it subscribes to the main topic and to <queue>.retry.<n>ms). Redrives,
// redirects, releases of parked messages and share-group give-backs go
// there; the main topic would reach every other consumer group too.
func ReturnTopic(queue string) string { return RetryTopic(queue, 0) }

// directRecord points the record of a message for queue's consumer alone
// (PublishParams.Direct) at a return topic. A redrive goes back to the
// consumer that failed: queue's group, or for a foreign dead letter the
// origin topic's Lily group — when the evidence names another group
// (a Spring Kafka listener, a Kafka Connect sink), no topic reaches it
// alone and the message is refused rather than produced to the origin
// topic, which every consumer group of it reads. A redirect goes to
// queue's return topic whatever its evidence says. The partition is the
// origin's when the evidence names it, else the key's (the return topic
// has the main topic's partition count, so it is the same number).
func (t *Transport) directRecord(ctx context.Context, queue string, redrive bool, m transport.Message, rec *kgo.Record) error {
	o := origin{topic: queue}
	if redrive {
		o = redriveOrigin(queue, m.Headers)
	}
	if lily := t.group(o.topic); o.group != "" && o.group != lily {
		return fmt.Errorf("message %s failed in consumer group %q (%s evidence) of topic %s, which is not Lily's (%s): %w; producing to %s would reach every consumer group of the topic. Redirect it to another Lily queue (lily dlq redrive --to QUEUE), or republish it with that group's own tooling (lily dlq export gives body and headers)",
			m.EventID, o.group, o.system, o.topic, lily, errNoPathAlone, o.topic)
	}
	topic := ReturnTopic(o.topic)
	n, err := t.partitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("message %s: the return topic %s, which only consumer group %s reads, is missing: %w (create it with 'lily topology apply'; the source topic %s would reach every other consumer group too)",
			m.EventID, topic, t.group(o.topic), err, o.topic)
	}
	rec.Topic = topic
	if !o.pinned {
		return nil
	}
	if o.part >= n {
		return fmt.Errorf("message %s came from partition %d of %s, and %s has %d partitions (recreated?): refusing to send it elsewhere", m.EventID, o.part, o.topic, topic, n)
	}
	pin(rec, o.part)
	return nil
}

// redriveRecord builds the record of a redriven message that is not
// Direct: to its origin topic and partition when its foreign evidence
// names them — read by every consumer group of that topic. A partition
// the topic no longer has (the topic was recreated smaller) is an error
// naming both: the message would otherwise land beside records of other
// keys, out of order.
func (t *Transport) redriveRecord(ctx context.Context, queue string, m transport.Message, rec *kgo.Record) error {
	o := redriveOrigin(queue, m.Headers)
	if o.topic != rec.Topic {
		if _, err := t.partitions(ctx, o.topic); err != nil {
			return fmt.Errorf("origin topic %s of %s: %w", o.topic, m.EventID, err)
		}
		rec.Topic = o.topic
	}
	if !o.pinned {
		return nil
	}
	n, err := t.partitions(ctx, o.topic)
	if err != nil {
		return fmt.Errorf("origin topic %s of %s: %w", o.topic, m.EventID, err)
	}
	if o.part >= n {
		return fmt.Errorf("message %s came from partition %d of %s, which has %d partitions now (recreated?): refusing to send it elsewhere", m.EventID, o.part, o.topic, n)
	}
	pin(rec, o.part)
	return nil
}
