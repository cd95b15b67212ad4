package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// redriveOrigin returns where a redriven message goes: the topic and
// partition named by the dead letter's foreign evidence — Spring Kafka's
// kafka_dlt-original-topic and kafka_dlt-original-partition (a 4-byte
// big-endian int), Kafka Connect's __connect.errors.topic and
// __connect.errors.partition (strings), Kafka Streams'
// __streams.errors.topic and __streams.errors.partition — else queue, with
// no partition (the key picks it, as for Lily's own dead letters, which
// the DLT keeps on the key's partition).
func redriveOrigin(queue string, h transport.Headers) (topic string, part int32, pinned bool) {
	for _, f := range evidence.DecodeForeign(h) {
		switch f.System {
		case evidence.SystemSpringKafka, evidence.SystemKafkaConnect, evidence.SystemKafkaStreams:
		default:
			continue
		}
		topic = f.Source
		if topic == "" {
			topic = queue
		}
		return topic, f.Partition, f.HasPartition && f.Partition >= 0
	}
	return queue, 0, false
}

// redriveRecord builds the record of a redriven message: to its origin
// topic and partition when its foreign evidence names them. A partition
// the topic no longer has (the topic was recreated smaller) is an error
// naming both: the message would otherwise land beside records of other
// keys, out of order.
func (t *Transport) redriveRecord(ctx context.Context, queue string, m transport.Message, rec *kgo.Record) error {
	topic, part, pinned := redriveOrigin(queue, m.Headers)
	if topic != rec.Topic {
		if _, err := t.partitions(ctx, topic); err != nil {
			return fmt.Errorf("origin topic %s of %s: %w", topic, m.EventID, err)
		}
		rec.Topic = topic
	}
	if !pinned {
		return nil
	}
	n, err := t.partitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("origin topic %s of %s: %w", topic, m.EventID, err)
	}
	if part >= n {
		return fmt.Errorf("message %s came from partition %d of %s, which has %d partitions now (recreated?): refusing to send it elsewhere", m.EventID, part, topic, n)
	}
	pin(rec, part)
	return nil
}
