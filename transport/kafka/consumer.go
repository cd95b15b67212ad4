package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily/transport"
)

type instanceKey struct{ queue, name string }

// entryState is where a fetched record is in its life in this process.
type entryState uint8

const (
	statePending  entryState = iota // fetched, waiting to be handed out
	stateReserved                   // picked; its count is being saved
	stateHanded                     // handed out, not settled
	stateDone                       // settled: its offset may be committed
)

// entry is one fetched record.
type entry struct {
	rec   *kgo.Record
	msg   transport.Message
	state entryState
	// due is when the record may be handed out: a retry copy's due time,
	// or a release's delay.
	due time.Time
	// srcPart and srcOff are the record's coordinates on the main topic:
	// its own, or for a retry copy the original's.
	srcPart int32
	srcOff  int64
	// prior is the count a share member's give-back copy carries (the
	// original's deliveries no handler finished); 0 for other records.
	prior int32
	hands uint32 // hand-out number, checked by receipts
}

// part is the state of one assigned partition of the main topic or of a
// retry topic.
type part struct {
	tp       TopicPartition
	retry    bool
	delay    time.Duration // the retry topic's delay
	loaded   bool          // counts loaded from the AttemptStore
	revoking bool
	paused   bool
	// counts are the persisted delivery counts of records handed out and
	// not settled (including those of earlier owners).
	counts    Attempts
	log       []*entry // fetched and not committable yet, in offset order
	first     int64    // first fetched offset, -1 before
	next      int64    // offset after the last fetched record, -1 before
	committed int64    // last committed offset, -1 before
	handed    int
}

// commitPoint is the offset the group may commit for the partition: the
// first record not settled, or past the last fetched record; -1 when
// nothing was fetched.
func (p *part) commitPoint() int64 {
	if len(p.log) > 0 {
		return p.log[0].rec.Offset
	}
	return p.next
}

// popDone drops settled records from the front of the log.
func (p *part) popDone() {
	i := 0
	for i < len(p.log) && p.log[i].state == stateDone {
		i++
	}
	if i > 0 {
		p.log = append(p.log[:0:0], p.log[i:]...)
	}
}

// instance is one consumer instance (ReceiveParams.Consumer) of one queue:
// a group member with its own franz-go client, consuming the main topic and
// its retry topics.
type instance struct {
	t     *Transport
	key   instanceKey
	group string
	cl    *kgo.Client

	recvMu   sync.Mutex // one Receive at a time (polls are not concurrent)
	polled   time.Time  // the last poll of a share-group queue's retry topics (receiveRetries); with recvMu
	saveMu   sync.Mutex // held while a snapshot is saved; revocation waits for it
	commitMu sync.Mutex // commits in order

	mu      sync.Mutex
	settled *sync.Cond // broadcast when a hand-out ends (settled or void)
	parts   map[TopicPartition]*part
	epoch   uint64                    // counts revocations
	gone    map[TopicPartition]uint64 // epoch of each partition's last revocation
	closing bool
	rr      int
	wake    chan struct{}
}

// errInstanceClosed means the instance's client was closed (stopped or
// abandoned) while a call was using it.
var errInstanceClosed = errors.New("kafka: consumer instance closed")

// instance returns the consumer instance of queue named name, joining the
// group on first use.
func (t *Transport) instance(queue, name string) (*instance, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed
	}
	k := instanceKey{queue, name}
	if c, ok := t.instances[k]; ok {
		return c, nil
	}
	c := &instance{t: t, key: k, group: t.group(queue), parts: map[TopicPartition]*part{},
		gone: map[TopicPartition]uint64{}, wake: make(chan struct{}, 1)}
	c.settled = sync.NewCond(&c.mu)
	o := t.opts
	sub := subscription(queue)
	if spec, ok := t.specs.Lookup(queue); ok && spec.ShareGroup != "" {
		sub = retrySubscription(queue) // the share group consumes the main topic
	}
	opts := t.clientOpts(
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics(sub),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { c.giveUp(ctx, cl, m, true) }),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { c.giveUp(ctx, cl, m, false) }),
		kgo.SessionTimeout(o.SessionTimeout),
		kgo.RebalanceTimeout(o.RebalanceTimeout),
		kgo.HeartbeatInterval(o.HeartbeatInterval),
		kgo.MetadataMaxAge(o.MetadataMaxAge),
		kgo.FetchMaxWait(time.Second),
	)
	if o.StaticMembership && name != "" {
		opts = append(opts, kgo.InstanceID(name))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: consumer %s of %s: %w", name, queue, err)
	}
	c.cl = cl
	t.instances[k] = c
	return c, nil
}

// onAssigned starts tracking newly assigned partitions. Their delivery
// counts are loaded before their first record is handed out.
func (c *instance) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	for topic, ps := range assigned {
		q, ms, isRetry := ParseRetryTopic(topic)
		isRetry = isRetry && q == c.key.queue
		for _, n := range ps {
			tp := TopicPartition{topic, n}
			if p := c.parts[tp]; p != nil && !p.revoking {
				continue // still ours: keep what was fetched and handed out
			}
			c.parts[tp] = &part{tp: tp, retry: isRetry, delay: time.Duration(ms) * time.Millisecond,
				first: -1, next: -1, committed: -1}
		}
	}
}

// giveUp handles revoked (commit) or lost partitions: no more hand-outs or
// snapshot writes for them; a revoked partition waits (RevokeTimeout) for
// its handed-out deliveries to be settled and commits what was settled.
// Deliveries still unsettled become void (ErrLeaseLost): the next owner
// redelivers them with their counts raised.
func (c *instance) giveUp(ctx context.Context, cl *kgo.Client, lost map[string][]int32, commit bool) {
	c.saveMu.Lock()
	c.mu.Lock()
	c.epoch++
	var ps []*part
	for topic, parts := range lost {
		for _, n := range parts {
			c.gone[TopicPartition{topic, n}] = c.epoch
			if p := c.parts[TopicPartition{topic, n}]; p != nil {
				p.revoking = true
				ps = append(ps, p)
			}
		}
	}
	closing := c.closing
	c.mu.Unlock()
	c.saveMu.Unlock()
	if len(ps) == 0 {
		return
	}
	if commit && !closing {
		c.waitSettled(ps, time.Now().Add(c.t.opts.RevokeTimeout))
		if err := c.commit(ctx, cl, ps); err != nil {
			c.t.opts.Logger.Warn("kafka: commit on revoke failed; the next owner redelivers from the last commit", "group", c.group, "err", err)
		}
	}
	resume := map[string][]int32{}
	c.mu.Lock()
	for _, p := range ps {
		if c.parts[p.tp] == p {
			delete(c.parts, p.tp)
		}
		if p.paused {
			resume[p.tp.Topic] = append(resume[p.tp.Topic], p.tp.Partition)
		}
	}
	c.settled.Broadcast()
	c.mu.Unlock()
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume) // pauses outlive assignments
	}
}

// waitIdle reports whether the instance has records handed out and not
// settled; if so, it waits up to d for them first.
func (c *instance) waitIdle(d time.Duration) bool {
	c.mu.Lock()
	var ps []*part
	for _, p := range c.parts {
		if p.handed > 0 {
			ps = append(ps, p)
		}
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return false
	}
	c.waitSettled(ps, time.Now().Add(d))
	return true
}

// waitSettled waits until the parts have nothing handed out, or deadline.
func (c *instance) waitSettled(ps []*part, deadline time.Time) {
	timer := time.AfterFunc(time.Until(deadline), func() {
		c.mu.Lock()
		c.settled.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for time.Now().Before(deadline) && !c.closing {
		busy := false
		for _, p := range ps {
			busy = busy || p.handed > 0
		}
		if !busy {
			return
		}
		c.settled.Wait()
	}
}

// commit commits the commit point of each part that moved (all parts when
// ps is nil), synchronously.
func (c *instance) commit(ctx context.Context, cl *kgo.Client, ps []*part) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	if ps == nil {
		for _, p := range c.parts {
			ps = append(ps, p)
		}
	}
	offs := map[string]map[int32]kgo.EpochOffset{}
	var moved []*part
	var at []int64
	for _, p := range ps {
		if cp := p.commitPoint(); cp > p.committed && cp >= 0 {
			if offs[p.tp.Topic] == nil {
				offs[p.tp.Topic] = map[int32]kgo.EpochOffset{}
			}
			offs[p.tp.Topic][p.tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cp}
			moved, at = append(moved, p), append(at, cp)
		}
	}
	c.mu.Unlock()
	if len(moved) == 0 {
		return nil
	}
	var cerr error
	failed := map[TopicPartition]bool{}
	cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					cerr = e
					failed[TopicPartition{t.Topic, p.Partition}] = true
				}
			}
		}
	})
	c.mu.Lock()
	for i, p := range moved {
		if cerr != nil && (len(failed) == 0 || failed[p.tp]) {
			continue
		}
		if at[i] > p.committed {
			p.committed = at[i]
			for off := range p.counts {
				if off < p.committed {
					delete(p.counts, off)
				}
			}
		}
	}
	c.mu.Unlock()
	if cerr != nil {
		return fmt.Errorf("kafka: commit offsets of group %s: %w", c.group, cerr)
	}
	return nil
}

// stop ends the instance: it commits what was settled (when commit), then
// leaves the group. What was fetched and not handed out is fetched again by
// the next owner.
func (c *instance) stop(ctx context.Context, commit bool) int {
	if commit {
		if err := c.commit(ctx, c.cl, nil); err != nil {
			c.t.opts.Logger.Warn("kafka: final commit failed; settled records may be redelivered", "group", c.group, "err", err)
		}
	}
	c.mu.Lock()
	c.closing = true
	n := 0
	for _, p := range c.parts {
		for _, e := range p.log {
			if e.state != stateDone {
				n++
			}
		}
	}
	c.settled.Broadcast()
	c.mu.Unlock()
	c.cl.Close()
	return n
}

// StopConsumer ends a consumer instance after the runtime settled what it
// received: it commits the settled offsets and leaves the group, so that
// its partitions move to the other members at once.
func (t *Transport) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	t.mu.Lock()
	k := instanceKey{p.Queue, p.Consumer}
	c, ok := t.instances[k]
	delete(t.instances, k)
	t.mu.Unlock()
	for _, s := range t.takeShare(p.Queue, p.Consumer) {
		s.stop(true)
	}
	if ok {
		c.stop(ctx, true)
	}
	return nil
}

// RecoverLeases ends a consumer instance as if its process died: nothing is
// committed, its client leaves the group, and its unsettled records are
// redelivered to the group with their persisted counts raised. It returns
// how many records it held (handed out or fetched) uncommitted.
func (t *Transport) RecoverLeases(_ context.Context, p *transport.RecoverParams) (int, error) {
	t.mu.Lock()
	var cs []*instance
	for k, c := range t.instances {
		if k.name == p.Consumer {
			cs = append(cs, c)
			delete(t.instances, k)
		}
	}
	t.mu.Unlock()
	n := 0
	for _, s := range t.takeShare("", p.Consumer) {
		n += s.stop(false)
	}
	for _, c := range cs {
		n += c.stop(context.Background(), false)
	}
	return n, nil
}

// orderedParts returns the parts sorted by topic and partition, rotated by
// the round-robin counter.
func (c *instance) orderedParts() []*part {
	ps := make([]*part, 0, len(c.parts))
	for _, p := range c.parts {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].tp.Topic != ps[j].tp.Topic {
			return ps[i].tp.Topic < ps[j].tp.Topic
		}
		return ps[i].tp.Partition < ps[j].tp.Partition
	})
	if len(ps) > 1 {
		c.rr = (c.rr + 1) % len(ps)
		ps = append(ps[c.rr:], ps[:c.rr]...)
	}
	return ps
}
