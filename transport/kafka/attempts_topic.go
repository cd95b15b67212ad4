package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// topicAttempts is the default AttemptStore: the compacted topic
// <queue>.attempts. The snapshot of a source partition (of the main topic
// or of a retry topic) is one record keyed "<group>\x00<topic>\x00<part>"
// in attempts partition <part> mod the topic's partition count, so that
// the topic keeps one record per key after compaction. Loading reads the
// attempts partition backwards from its end, in growing windows, until
// every wanted key was found: with one group per queue the newest
// snapshot of a main-topic partition is the partition's last record.
type topicAttempts struct{ t *Transport }

func attemptKey(group string, tp TopicPartition) string {
	return group + "\x00" + tp.Topic + "\x00" + strconv.FormatInt(int64(tp.Partition), 10)
}

// SaveAttempts implements AttemptStore: one record per partition, all
// produced with acks=all and awaited.
func (s *topicAttempts) SaveAttempts(ctx context.Context, group, queue string, snaps map[TopicPartition]Attempts) error {
	topic := AttemptsTopic(queue)
	recs := make([]*kgo.Record, 0, len(snaps))
	for tp, a := range snaps {
		r := &kgo.Record{Topic: topic, Key: []byte(attemptKey(group, tp)), Value: encodeAttempts(a)}
		pin(r, tp.Partition)
		recs = append(recs, r)
	}
	if err := errors.Join(s.t.produce(ctx, recs)...); err != nil {
		return fmt.Errorf("kafka: save delivery counts to %s: %w", topic, err)
	}
	return nil
}

// LoadAttempts implements AttemptStore, reading each attempts partition
// backwards from its end (64 records, then 8 times more each step) until
// every wanted key was found or the log start was reached.
func (s *topicAttempts) LoadAttempts(ctx context.Context, group, queue string, parts []TopicPartition) (map[TopicPartition]Attempts, error) {
	topic := AttemptsTopic(queue)
	n, err := s.t.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	need := map[int32]map[string]TopicPartition{}
	for _, tp := range parts {
		ap := tp.Partition % n
		if need[ap] == nil {
			need[ap] = map[string]TopicPartition{}
		}
		need[ap][attemptKey(group, tp)] = tp
	}
	starts, err := s.t.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: start offsets of %s: %w", topic, err)
	}
	ends, err := s.t.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: end offsets of %s: %w", topic, err)
	}
	out := map[TopicPartition]Attempts{}
	for ap, keys := range need {
		st, _ := starts.Lookup(topic, ap)
		en, _ := ends.Lookup(topic, ap)
		hi, window := en.Offset, int64(64)
		for len(keys) > 0 && hi > st.Offset {
			lo := max(st.Offset, hi-window)
			got, err := s.t.readRanges(ctx, topic, map[int32][2]int64{ap: {lo, hi}})
			if err != nil {
				return nil, err
			}
			recs := got[ap]
			for i := len(recs) - 1; i >= 0 && len(keys) > 0; i-- {
				tp, ok := keys[string(recs[i].Key)]
				if !ok {
					continue
				}
				a, err := decodeAttempts(recs[i].Value)
				if err != nil {
					return nil, fmt.Errorf("kafka: %s/%d offset %d: %w", topic, ap, recs[i].Offset, err)
				}
				out[tp] = a
				delete(keys, string(recs[i].Key))
			}
			hi, window = lo, window*8
		}
	}
	return out, nil
}

// readRanges reads the records of topic at offsets [lo, hi) of each given
// partition.
func (t *Transport) readRanges(ctx context.Context, topic string, ranges map[int32][2]int64) (map[int32][]*kgo.Record, error) {
	from, to := map[int32]int64{}, map[int32]int64{}
	for p, r := range ranges {
		from[p], to[p] = r[0], r[1]
	}
	out := map[int32][]*kgo.Record{}
	err := t.scan(ctx, topic, from, to, func(r *kgo.Record) error {
		out[r.Partition] = append(out[r.Partition], r)
		return nil
	})
	return out, err
}
