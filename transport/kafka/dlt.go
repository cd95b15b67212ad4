package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// errStopScan ends a scan early without error.
var errStopScan = errors.New("stop scan")

// scan reads topic from the offsets in from up to (not including) those in
// to, per partition, with a short-lived direct consumer (no group),
// calling fn for each record in offset order per partition. Control
// records (transaction markers) are skipped. fn may return errStopScan.
func (t *Transport) scan(ctx context.Context, topic string, from, to map[int32]int64, fn func(*kgo.Record) error) error {
	offsets := map[int32]kgo.Offset{}
	left := map[int32]bool{}
	for p, lo := range from {
		if lo < to[p] {
			offsets[p] = kgo.NewOffset().At(lo)
			left[p] = true
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(t.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("kafka: reader for %s: %w", topic, err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, t.opts.ProduceTimeout)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return fmt.Errorf("kafka: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !isCtxErr(err) {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("kafka: read %s: %w", topic, ferr)
		}
		var stop error
		fs.EachRecord(func(r *kgo.Record) {
			if stop != nil || !left[r.Partition] {
				return
			}
			if r.Offset >= from[r.Partition] && r.Offset < to[r.Partition] && !r.Attrs.IsControl() {
				if err := fn(r); err != nil {
					stop = err
					return
				}
			}
			if r.Offset >= to[r.Partition]-1 {
				delete(left, r.Partition)
			}
		})
		if errors.Is(stop, errStopScan) {
			return nil
		}
		if stop != nil {
			return stop
		}
	}
	return nil
}

// bounds returns the start and end offsets of every partition of topic.
func (t *Transport) bounds(ctx context.Context, topic string) (start, end map[int32]int64, err error) {
	starts, err := t.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			err = fmt.Errorf("%w: %v", transport.ErrUnknownQueue, err)
		}
		return nil, nil, fmt.Errorf("kafka: start offsets of %s: %w", topic, err)
	}
	ends, err := t.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: end offsets of %s: %w", topic, err)
	}
	start, end = map[int32]int64{}, map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { start[o.Partition] = o.Offset })
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return start, end, nil
}

// deadLetter converts a record of a dead-letter topic into a delivery of
// queue: Lily's typed headers come back typed, other producers' headers
// (Spring Kafka's kafka_dlt-*, Kafka Connect's __connect.errors.*, Kafka
// Streams' __streams.errors.*) as []byte, as evidence.DecodeForeign reads
// them. A record without x-lily-event-id gets "<topic>/<partition>/
// <offset>" as its event ID.
func deadLetter(queue string, r *kgo.Record) *transport.Delivery {
	m, _ := recordMessage(r)
	d := &transport.Delivery{Message: m, Queue: queue, DeliveryCount: 1, EnqueuedAt: r.Timestamp,
		Partition: r.Partition, Offset: r.Offset, HasOffset: true, MessageID: recordID(r)}
	if n, ok := evidence.Int(m.Headers[evidence.HeaderDeliveryCount]); ok && n > 0 {
		d.DeliveryCount = int(n)
	}
	return d
}

// PeekParams are the arguments of Transport.Peek.
type PeekParams struct {
	// Topic to read, e.g. DeadLetterTopic("orders.created").
	Topic string
	// Queue is the Queue of the returned deliveries. Defaults to Topic.
	Queue string
	// Limit is the most records returned; 0 means all.
	Limit int
}

// Peek returns the records of a topic from its start to its current end,
// by partition and offset, without consuming them (no group, no commit).
func (t *Transport) Peek(ctx context.Context, p *PeekParams) ([]*transport.Delivery, error) {
	queue := p.Queue
	if queue == "" {
		queue = p.Topic
	}
	start, end, err := t.bounds(ctx, p.Topic)
	if err != nil {
		return nil, err
	}
	var out []*transport.Delivery
	err = t.scan(ctx, p.Topic, start, end, func(r *kgo.Record) error {
		out = append(out, deadLetter(queue, r))
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortDeliveries(out)
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// DeadLetters returns the dead letters of queue waiting in its
// dead-letter topic (drained or not), without consuming them.
func (t *Transport) DeadLetters(ctx context.Context, queue string) ([]*transport.Delivery, error) {
	return t.Peek(ctx, &PeekParams{Topic: t.deadLetterTopic(queue), Queue: queue})
}

// DrainDeadLetters moves the dead letters of p.Queue — its dead-letter
// topic, <queue>.dlt or the one Options.DeadLetterTopics names — to store
// in batches, from where the drain group (DrainGroup of the queue's group)
// stopped up to the topic's end when the drain began. A batch's offsets
// are committed to the drain group only after store returned nil for it
// (catalog commit, then broker commit): a crash in between hands the
// batch to store again, which catalog ingest absorbs (idempotent). The
// records stay in the topic; Kafka's retention, not the drain, removes
// them.
func (t *Transport) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 256
	}
	topic, group := t.deadLetterTopic(p.Queue), DrainGroup(t.group(p.Queue))
	from, end, err := t.undrained(ctx, topic, group)
	if err != nil {
		return 0, err
	}
	total := 0
	var ds []*transport.Delivery
	flush := func() error {
		if len(ds) == 0 {
			return nil
		}
		if err := store(ctx, ds); err != nil {
			return err
		}
		offs := kadm.Offsets{}
		for _, d := range ds {
			offs.AddOffset(topic, d.Partition, d.Offset+1, -1)
		}
		resp, err := t.adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka: drain %s: commit after store: %w (the batch may be stored again; ingest is idempotent)", topic, err)
		}
		total += len(ds)
		ds = nil
		return nil
	}
	err = t.scan(ctx, topic, from, end, func(r *kgo.Record) error {
		if p.Limit > 0 && total+len(ds) >= p.Limit {
			return errStopScan
		}
		ds = append(ds, deadLetter(p.Queue, r))
		if len(ds) >= batch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return total, err
	}
	if err := flush(); err != nil {
		return total, err
	}
	return total, nil
}

// undrained returns, per partition of topic, where the drain group
// stopped (the log start when it committed nothing) and the end.
func (t *Transport) undrained(ctx context.Context, topic, group string) (from, end map[int32]int64, err error) {
	start, end, err := t.bounds(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	committed, err := t.adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil, fmt.Errorf("kafka: drain offsets of group %s: %w", group, err)
	}
	from = map[int32]int64{}
	for part, s := range start {
		from[part] = s
		if c, ok := committed.Lookup(topic, part); ok && c.Err == nil && c.At > s {
			from[part] = c.At
		}
	}
	return from, end, nil
}

// PeekUndrained returns up to limit (0: all) dead letters of queue not
// drained into the catalog yet — records of its dead-letter topic past the
// drain group's offsets, the first ones fetched of each partition — sorted
// by partition and offset, without consuming them.
func (t *Transport) PeekUndrained(ctx context.Context, queue string, limit int) ([]*transport.Delivery, error) {
	topic := t.deadLetterTopic(queue)
	from, end, err := t.undrained(ctx, topic, DrainGroup(t.group(queue)))
	if err != nil {
		return nil, err
	}
	var out []*transport.Delivery
	err = t.scan(ctx, topic, from, end, func(r *kgo.Record) error {
		if limit > 0 && len(out) >= limit {
			return errStopScan // enough: the rest stays unread
		}
		out = append(out, deadLetter(queue, r))
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortDeliveries(out)
	return out, nil
}

// sortDeliveries orders deliveries by partition and offset.
func sortDeliveries(ds []*transport.Delivery) {
	sort.SliceStable(ds, func(i, j int) bool {
		if ds[i].Partition != ds[j].Partition {
			return ds[i].Partition < ds[j].Partition
		}
		return ds[i].Offset < ds[j].Offset
	})
}

// DeadLetterDepth counts the dead letters of queue not drained yet: the
// records of its dead-letter topic past the drain group's offsets.
func (t *Transport) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	return t.lag(ctx, DrainGroup(t.group(queue)), t.deadLetterTopic(queue))
}
