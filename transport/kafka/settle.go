package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Settle applies settlements in the safe order (docs/design.md §4, §8):
//
//   - Retry produces the copy, with s.Headers, to <topic>.retry.<ms>ms for
//     s.Delay (same key, same partition number, the original's partition
//     and offset and the due time in headers), with acks=all, and waits;
//   - DeadLetter produces the copy with its evidence to the dead-letter
//     topic (same key, same partition number) the same way;
//   - only then is the original marked settled; Ack marks it at once;
//   - Release gives it back to this consumer for redelivery (after
//     s.Delay), its count kept, so that it comes back with the count +1.
//
// After marking, the group's offsets are committed synchronously, each
// partition up to its first record not settled: never past a record whose
// copy was not confirmed. A produce that fails, is refused or times out
// (ProduceTimeout) fails its settlement in the *transport.SettleError and
// leaves the original unsettled. A delivery whose partition was revoked
// (or whose consumer stopped) meanwhile fails with transport.ErrLeaseLost,
// nothing done: its next owner redelivers it.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	n := len(p.Settlements)
	if n == 0 {
		return nil
	}
	if t.isClosed() {
		return errClosed
	}
	errs := make([]error, n)
	rcs := make([]*receipt, n)
	var recs []*kgo.Record
	var recOf []int
	var shared []int
	for i, s := range p.Settlements {
		if _, ok := s.Delivery.Receipt.(*shareEntry); ok {
			shared = append(shared, i)
			continue
		}
		rc, ok := s.Delivery.Receipt.(*receipt)
		if !ok || rc.c.t != t {
			errs[i] = fmt.Errorf("kafka: settle %s: delivery was not received from this transport", s.Delivery.EventID)
			continue
		}
		rcs[i] = rc
		if err := rc.held(); err != nil {
			errs[i] = err
			continue
		}
		if s.Action != transport.Retry && s.Action != transport.DeadLetter {
			continue
		}
		r, err := t.handOff(ctx, s, rc.c.key.queue, rc.e.srcPart, rc.e.srcOff)
		if err != nil {
			errs[i] = err
			continue
		}
		recs = append(recs, r)
		recOf = append(recOf, i)
	}
	for j, err := range t.produce(ctx, recs) {
		if err != nil {
			s := p.Settlements[recOf[j]]
			if p.FailRefused && s.Action == transport.DeadLetter && (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) {
				// The dead-letter topic refuses it for good (its batch is
				// over max.message.bytes; a small copy batched with a large
				// one is refused with it): the caller (ledger.Accounted)
				// stores it in the catalog, then acknowledges the original.
				errs[recOf[j]] = fmt.Errorf("kafka: dead-letter hand-off of %s: %w: the dead-letter topic %s refused the batch holding the copy as over its max.message.bytes: %w",
					s.Delivery.EventID, transport.ErrDeadLetterRefused, recs[j].Topic, err)
				continue
			}
			errs[recOf[j]] = fmt.Errorf("kafka: %s hand-off of %s not confirmed, original kept: %w", s.Action, s.Delivery.EventID, err)
		}
	}
	if len(shared) > 0 {
		t.settleShare(ctx, p.Settlements, shared, errs)
	}
	touched := map[*instance]bool{}
	for i, s := range p.Settlements {
		if errs[i] != nil || rcs[i] == nil {
			continue
		}
		switch s.Action {
		case transport.Ack, transport.Retry, transport.DeadLetter, transport.Release:
			errs[i] = rcs[i].mark(s.Action, s.Delay)
		default:
			errs[i] = fmt.Errorf("kafka: settle %s: unknown action %d", s.Delivery.EventID, s.Action)
		}
		if errs[i] == nil && s.Action != transport.Release {
			touched[rcs[i].c] = true
		}
	}
	for c := range touched {
		if err := c.commit(ctx, c.cl, nil); err != nil {
			// The settlements stand (copies confirmed, offsets marked); a
			// later commit carries them, or the next owner redelivers.
			t.opts.Logger.Warn("kafka: commit after settle failed; it is retried with the next one", "group", c.group, "err", err)
		}
	}
	for _, err := range errs {
		if err != nil {
			return &transport.SettleError{Errs: errs}
		}
	}
	return nil
}

// held reports whether the receipt's hand-out is still this consumer's.
func (r *receipt) held() error {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	return r.heldLocked()
}

// heldLocked is held with the consumer's lock taken: transport.ErrLeaseLost
// when the consumer stopped, the partition moved or the hand-out was
// settled or handed out again since.
func (r *receipt) heldLocked() error {
	if r.c.closing || r.c.parts[r.p.tp] != r.p || r.e.state != stateHanded || r.e.hands != r.hands {
		return fmt.Errorf("kafka: %s offset %d: consumer stopped or partition moved to another member; it will be redelivered: %w",
			r.p.tp.Topic, r.e.rec.Offset, transport.ErrLeaseLost)
	}
	return nil
}

// mark records a settlement of the receipt's hand-out.
func (r *receipt) mark(a transport.Action, delay time.Duration) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := r.heldLocked(); err != nil {
		return err
	}
	p, e := r.p, r.e
	p.handed--
	if a == transport.Release {
		e.state = statePending
		if delay > 0 {
			e.due = time.Now().Add(delay)
		}
		c.settled.Broadcast()
		c.signal()
		return nil
	}
	e.state = stateDone
	delete(p.counts, e.rec.Offset)
	p.popDone()
	c.settled.Broadcast()
	return nil
}

// handOff builds the copy of a Retry or a DeadLetter settlement of a
// record of queue whose coordinates on the main topic are srcPart/srcOff.
func (t *Transport) handOff(ctx context.Context, s transport.Settlement, queue string, srcPart int32, srcOff int64) (*kgo.Record, error) {
	return t.handOffDue(ctx, s, queue, srcPart, srcOff, time.Now().Add(s.Delay))
}

// handOffDue is handOff with a retry copy due at due, not after its
// bucket's delay: a share member's give-back copy is due at once.
func (t *Transport) handOffDue(ctx context.Context, s transport.Settlement, queue string, srcPart int32, srcOff int64, due time.Time) (*kgo.Record, error) {
	d := s.Delivery
	m := d.Message
	m.Headers = s.Headers
	var topic string
	extra := transport.Headers{}
	if s.Action == transport.DeadLetter {
		topic = t.deadLetterTopic(queue)
	} else {
		ms := s.Delay.Milliseconds()
		if spec, ok := t.spec(queue); ok {
			if !slices.Contains(topicBuckets(spec), ms) {
				return nil, fmt.Errorf("kafka: retry of %s after %dms: queue %s has no such bucket (buckets %v): the runtime and topology disagree", m.EventID, ms, queue, spec.BucketsMillis)
			}
		}
		topic = RetryTopic(queue, ms)
		extra[HeaderDueAt] = due.UnixMilli()
		extra[evidence.HeaderSourcePartition] = srcPart
		extra[evidence.HeaderSourceOffset] = srcOff
	}
	if _, err := t.partitions(ctx, topic); err != nil {
		return nil, fmt.Errorf("kafka: %s hand-off of %s: %w", s.Action, m.EventID, err)
	}
	hs, err := messageHeaders(m, extra)
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic, Value: m.Body, Headers: hs}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	pin(r, srcPart)
	return r, nil
}

// deadLetterTopic returns the dead-letter topic of queue.
func (t *Transport) deadLetterTopic(queue string) string {
	if dt, ok := t.opts.DeadLetterTopics[queue]; ok && dt != "" {
		return dt
	}
	return DeadLetterTopic(queue)
}
