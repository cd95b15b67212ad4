package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// receipt settles one hand-out of an entry.
type receipt struct {
	c     *instance
	p     *part
	e     *entry
	hands uint32
}

// pick is an entry chosen for a hand-out with its new count.
type pick struct {
	p *part
	e *entry
	n int32 // the delivery count handed out: persisted attempts + 1 + the copy's carried count
}

// Receive hands out up to p.Max records of the queue's main topic and of
// its retry topics whose copies are due, as the consumer instance
// p.Consumer of the queue's group (joined on first use). It waits up to
// p.Wait for the first one, polling no longer than until the next retry
// copy is due. Before returning, it saves the raised delivery count of
// every record it hands out to the AttemptStore; if that fails, nothing is
// handed out and the error is returned.
//
// With p.IsolateRedeliveries a record handed out before and not settled
// (count > 1) is handed out alone, and a batch stops before one.
//
// A delivery's Partition and Offset are those of the record on the main
// topic — for a retry copy, the original's — and MessageID names the copy
// itself ("<topic>/<partition>/<offset>").
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	if spec, ok := t.spec(p.Queue); ok && spec.ShareGroup != "" {
		return t.receiveShare(ctx, p, spec)
	}
	c, err := t.instance(p.Queue, p.Consumer)
	if err != nil {
		return nil, err
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	limit := max(p.Max, 1)
	deadline := time.Now().Add(p.Wait)
	for first := true; ; first = false {
		ds, err := c.take(ctx, limit, p.IsolateRedeliveries)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		now := time.Now()
		if !first && !now.Before(deadline) {
			return nil, nil
		}
		wait := deadline.Sub(now)
		if due := c.nextDue(); !due.IsZero() && due.Sub(now) < wait {
			wait = due.Sub(now)
		}
		if err := c.poll(ctx, max(wait, time.Millisecond), limit); err != nil {
			if errors.Is(err, errInstanceClosed) {
				if t.isClosed() {
					return nil, errClosed
				}
				return nil, nil // abandoned or stopped: the next call joins anew
			}
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// poll fetches up to n records, waiting at most wait (or until a release
// wakes it), and adds them to their partitions.
func (c *instance) poll(ctx context.Context, wait time.Duration, n int) error {
	c.mu.Lock()
	e0, closing := c.epoch, c.closing
	c.mu.Unlock()
	if closing {
		return errInstanceClosed
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	done := make(chan struct{})
	go func() {
		select {
		case <-c.wake:
			cancel()
		case <-done:
		case <-pctx.Done():
		}
	}()
	fs := c.cl.PollRecords(pctx, n)
	close(done)
	cancel()
	if fs.IsClientClosed() {
		return errInstanceClosed
	}
	fs.EachError(func(topic string, part int32, err error) {
		if !isCtxErr(err) && !errors.Is(err, kgo.ErrClientClosed) {
			c.t.opts.Logger.Warn("kafka: fetch error; retrying", "topic", topic, "partition", part, "err", err)
		}
	})
	c.mu.Lock()
	fs.EachRecord(func(r *kgo.Record) {
		tp := TopicPartition{r.Topic, r.Partition}
		p := c.parts[tp]
		if p == nil || c.gone[tp] > e0 || p.revoking || (p.next >= 0 && r.Offset < p.next) {
			return // revoked (or re-assigned) since the poll began: the next owner fetches it
		}
		e := c.newEntry(p, r)
		p.log = append(p.log, e)
		p.next = r.Offset + 1
		if p.first < 0 {
			p.first = r.Offset
		}
	})
	var unloaded []*part
	for _, p := range c.parts {
		if !p.loaded && !p.revoking && len(p.log) > 0 {
			unloaded = append(unloaded, p)
		}
	}
	c.mu.Unlock()
	if len(unloaded) > 0 {
		if err := c.load(ctx, unloaded); err != nil {
			return err
		}
	}
	c.adjustPauses()
	return nil
}

// newEntry reads a fetched record. A retry copy carries the original's
// coordinates and its due time in headers, which are removed here.
func (c *instance) newEntry(p *part, r *kgo.Record) *entry {
	msg, internal := recordMessage(r)
	e := &entry{rec: r, msg: msg, srcPart: r.Partition, srcOff: r.Offset}
	if !p.retry {
		return e
	}
	if n, ok := evidence.Int(msg.Headers[evidence.HeaderSourcePartition]); ok {
		e.srcPart = int32(n)
	}
	if n, ok := evidence.Int(msg.Headers[evidence.HeaderSourceOffset]); ok {
		e.srcOff = n
	}
	delete(msg.Headers, evidence.HeaderSourcePartition)
	delete(msg.Headers, evidence.HeaderSourceOffset)
	// A copy a share member gave back (shareInstance.giveBack) carries the
	// deliveries of the original; its count goes on from there.
	e.prior = int32(evidence.PriorDeliveries(msg.Headers[evidence.HeaderPriorDeliveries]))
	delete(msg.Headers, evidence.HeaderPriorDeliveries)
	if ms, ok := evidence.Int(internal[HeaderDueAt]); ok {
		e.due = time.UnixMilli(ms)
	} else {
		e.due = r.Timestamp.Add(p.delay)
	}
	return e
}

// load reads the persisted counts of newly assigned partitions; counts
// below the first fetched offset (committed) are dropped.
func (c *instance) load(ctx context.Context, ps []*part) error {
	tps := make([]TopicPartition, len(ps))
	for i, p := range ps {
		tps[i] = p.tp
	}
	got, err := c.t.attempts.LoadAttempts(ctx, c.group, c.key.queue, tps)
	if err != nil {
		return fmt.Errorf("kafka: load delivery counts of group %s: %w", c.group, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range ps {
		if c.parts[p.tp] != p {
			continue
		}
		a := Attempts{}
		for off, n := range got[tps[i]] {
			if off >= p.first {
				a[off] = n
			}
		}
		p.counts, p.loaded = a, true
	}
	return nil
}

// take picks deliverable records, saves their raised counts and hands them
// out.
func (c *instance) take(ctx context.Context, limit int, isolate bool) ([]*transport.Delivery, error) {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, nil
	}
	picks := c.pick(limit, isolate, time.Now())
	if len(picks) == 0 {
		c.mu.Unlock()
		return nil, nil
	}
	snaps := map[TopicPartition]Attempts{}
	for _, pk := range picks {
		s, ok := snaps[pk.p.tp]
		if !ok {
			s = make(Attempts, len(pk.p.counts)+len(picks))
			for off, n := range pk.p.counts {
				s[off] = n
			}
			snaps[pk.p.tp] = s
		}
		s[pk.e.rec.Offset] = pk.n - pk.e.prior // the carried count is in the record, not in the store
	}
	c.mu.Unlock()
	err := c.t.attempts.SaveAttempts(ctx, c.group, c.key.queue, snaps)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || c.closing {
		for _, pk := range picks {
			if pk.e.state == stateReserved {
				pk.e.state = statePending
			}
		}
		if err != nil {
			return nil, fmt.Errorf("kafka: delivery counts not saved, nothing handed out: %w", err)
		}
		return nil, nil
	}
	for tp, s := range snaps {
		if p := c.parts[tp]; p != nil {
			p.counts = s
		}
	}
	out := make([]*transport.Delivery, len(picks))
	for i, pk := range picks {
		e := pk.e
		e.state = stateHanded
		e.hands++
		pk.p.handed++
		m := e.msg
		m.Headers = transport.CloneHeaders(e.msg.Headers)
		out[i] = &transport.Delivery{
			Message: m, Queue: c.key.queue, DeliveryCount: int(pk.n), EnqueuedAt: e.rec.Timestamp,
			Partition: e.srcPart, Offset: e.srcOff, HasOffset: true, MessageID: recordID(e.rec),
			Receipt: &receipt{c: c, p: pk.p, e: e, hands: e.hands},
		}
	}
	return out, nil
}

// pick chooses up to limit due records, round robin over the partitions
// and in offset order within one, and reserves them. With isolate, a
// record with a count (handed out before, not settled) comes alone, and a
// batch stops before one.
func (c *instance) pick(limit int, isolate bool, now time.Time) []pick {
	var ps []*part
	for _, p := range c.orderedParts() {
		if p.loaded && !p.revoking {
			ps = append(ps, p)
		}
	}
	cursor := make([]int, len(ps))
	var picks []pick
	for len(picks) < limit {
		progress, stop := false, false
		for i, p := range ps {
			j := cursor[i]
			for j < len(p.log) && (p.log[j].state != statePending || p.log[j].due.After(now)) {
				j++
			}
			cursor[i] = j
			if j == len(p.log) {
				continue
			}
			e := p.log[j]
			n := p.counts[e.rec.Offset] + 1 + e.prior
			if isolate && n > 1 {
				if len(picks) == 0 {
					e.state = stateReserved
					picks = append(picks, pick{p, e, n})
				}
				stop = true
				break
			}
			e.state = stateReserved
			picks = append(picks, pick{p, e, n})
			cursor[i] = j + 1
			progress = true
			if len(picks) == limit {
				break
			}
		}
		if stop || !progress {
			break
		}
	}
	return picks
}

// nextDue returns when the earliest record that waits for its time
// becomes due (zero when none waits).
func (c *instance) nextDue() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var next time.Time
	for _, p := range c.parts {
		for _, e := range p.log {
			if e.state == statePending && e.due.After(now) && (next.IsZero() || e.due.Before(next)) {
				next = e.due
			}
		}
	}
	return next
}

// adjustPauses pauses a retry partition while it holds a fetched copy that
// is not due yet, and resumes it once none waits: the wait happens in the
// broker, not in a handler, and no more of the partition is fetched
// meanwhile.
func (c *instance) adjustPauses() {
	pause, resume := map[string][]int32{}, map[string][]int32{}
	c.mu.Lock()
	now := time.Now()
	for _, p := range c.parts {
		if !p.retry || p.revoking {
			continue
		}
		waiting := false
		for _, e := range p.log {
			if e.state == statePending && e.due.After(now) {
				waiting = true
				break
			}
		}
		switch {
		case waiting && !p.paused:
			pause[p.tp.Topic] = append(pause[p.tp.Topic], p.tp.Partition)
			p.paused = true
		case !waiting && p.paused:
			resume[p.tp.Topic] = append(resume[p.tp.Topic], p.tp.Partition)
			p.paused = false
		}
	}
	c.mu.Unlock()
	if len(pause) > 0 {
		c.cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// signal wakes a Receive that is polling (a release made a record
// deliverable).
func (c *instance) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
