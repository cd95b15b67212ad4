package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/transport"
)

// Share groups (KIP-932). A queue with QueueSpec.ShareGroup is consumed by
// a share group: the broker hands each record of the main topic to one
// member at a time, locks it for the acquisition lock duration, counts its
// deliveries and archives it (silently) past group.share.delivery.count.limit.
// Lily uses the broker's count as Delivery.DeliveryCount, settles in the
// safe order (copy confirmed, then ACCEPT), extends locks with RENEW, and
// keeps its retry topics: they are consumed by the queue's consumer group
// ("lily.<queue>"), which pauses a retry partition until its head copy is
// due, exactly as for a queue without a share group.
//
// franz-go accepts every record of a poll that is not acknowledged before
// the next poll. So a share instance polls again only when every record of
// the previous poll has been settled (ACCEPT or RELEASE), never with one
// still held; and the records it holds, handed out or not, are renewed
// before their lock runs out.

// shareInstance is one consumer instance (ReceiveParams.Consumer) of a
// share-group queue: one member of the share group with its own client.
type shareInstance struct {
	t     *Transport
	key   instanceKey
	group string

	recvMu sync.Mutex // one Receive at a time (polls are not concurrent)

	mu     sync.Mutex
	cond   *sync.Cond // broadcast when a record is settled or the instance closes
	cl     *kgo.Client
	acq    *acquired // the records cl fetched that no poll returned yet
	gen    uint64    // counts clients: a receipt of an older one is void
	narrow bool      // the client fetches one record at a time (cautious)
	// wantNarrow is the width the last poll asked for: narrow after a
	// redelivery, wide after a first-time delivery.
	wantNarrow  bool
	parts       int32 // partitions of the main topic (how long a narrow member stays narrow)
	asked       int   // the most deliveries one Receive asked for (wide fetch size)
	freshStreak int   // narrow polls in a row that brought only first-time deliveries
	buf         []*shareEntry
	held        map[*shareEntry]struct{} // handed out, not settled
	closing     bool
	// cancelled: a graceful stop began (CancelConsume): no more polls;
	// Receive hands out what the last poll returned, then nothing.
	cancelled bool
	collected int            // polls made by the graceful stop (drainTake)
	done      chan struct{}  // closed when the instance ends (stops the renewer)
	retiring  sync.WaitGroup // clients being closed after a change of width (retire)

	// flushMu serializes acknowledge-and-flush rounds (settlements,
	// renewals), so that each reads only its own refusals.
	flushMu sync.Mutex
	ackMu   sync.Mutex
	ackSeq  uint64
	ackErrs []shareAckErr // broker refusals, newest last (bounded)
}

// shareEntry is one record of the share group held by this instance.
type shareEntry struct {
	s       *shareInstance
	gen     uint64
	rec     *kgo.Record
	msg     transport.Message
	renewed time.Time // acquired or last renewed
	handed  bool
	settled bool
	// over: delivered past the queue's delivery_limit, so the runtime
	// dead-letters it without a handler. It goes out alone and nothing
	// follows it until it is settled (take).
	over bool
}

// shareAckErr is a broker refusal of acknowledgements of one partition.
type shareAckErr struct {
	seq   uint64
	topic string
	part  int32
	err   error
}

// shareInstance returns the share-group member of queue named name,
// joining the group on first use.
func (t *Transport) shareInstance(ctx context.Context, spec transport.QueueSpec, name string) (*shareInstance, error) {
	queue, group := spec.Name, spec.ShareGroup
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	k := instanceKey{queue, name}
	if s, ok := t.shares[k]; ok {
		t.mu.Unlock()
		return s, nil
	}
	t.mu.Unlock()
	if err := t.checkShareGroup(ctx, spec); err != nil {
		return nil, err
	}
	parts, err := t.partitions(ctx, queue)
	if err != nil {
		return nil, err
	}
	// Without share.auto.offset.reset = earliest a new share group starts at
	// the log end: every record produced before its first member joined
	// would never be delivered.
	if err := t.ensureShareGroup(ctx, group); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed
	}
	if s, ok := t.shares[k]; ok {
		return s, nil
	}
	s := &shareInstance{t: t, key: k, group: group, held: map[*shareEntry]struct{}{}, done: make(chan struct{}), parts: parts}
	s.cond = sync.NewCond(&s.mu)
	// A new member starts wide. After a crash its first records may be the
	// dead process's redeliveries: a poll keeps one of them and gives the
	// others back (giveBack), so only one is in flight when it runs, and the
	// member then turns narrow. Starting narrow would mean a change of width
	// — a new client, the old one closed — on every start, and a close
	// releases a fetch answer that came after the last poll, its records'
	// counts raised with no handler having seen them.
	if err := s.connect(false); err != nil {
		return nil, err
	}
	t.shares[k] = s
	go s.renewLoop()
	return s, nil
}

// connect replaces the instance's client (the old one holds nothing: every
// record it polled was settled) by one fetching one record at a time
// (narrow) or up to ShareMaxRecords. Called with s.mu held or before the
// instance is shared.
func (s *shareInstance) connect(narrow bool) error {
	// A wide fetch takes what the runtime asks for at once (its window),
	// not more: a record held in the buffer is exposed to a crash of the
	// process without being worked on.
	n := int32(s.t.opts.ShareMaxRecords)
	if s.asked > 0 && int32(s.asked) < n {
		n = int32(s.asked)
	}
	if narrow {
		n = 1
	}
	acq := newAcquired()
	cl, err := kgo.NewClient(s.t.clientOpts(
		kgo.ShareGroup(s.group),
		kgo.ConsumeTopics(s.key.queue),
		kgo.ShareMaxRecords(n),
		kgo.ShareMaxRecordsStrict(), // and so no fetch but the one a poll asks for: nothing is acquired while Lily holds a poll
		kgo.FetchMaxWait(shareFetchWait(narrow)),
		kgo.MetadataMaxAge(s.t.opts.MetadataMaxAge),
		kgo.ShareAckCallback(s.acked),
		kgo.WithHooks(acq),
	)...)
	if err != nil {
		return fmt.Errorf("kafka: share group %s member %s of %s: %w", s.group, s.key.name, s.key.queue, err)
	}
	old, oldAcq := s.cl, s.acq
	s.cl, s.acq, s.narrow, s.wantNarrow = cl, acq, narrow, narrow
	s.gen++
	if old != nil {
		s.retiring.Add(1)
		go s.retire(old, oldAcq)
	}
	return nil
}

// acked records the broker's refusals of acknowledgements.
func (s *shareInstance) acked(_ *kgo.Client, rs kgo.ShareAckResults) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	for _, r := range rs {
		if r.Err == nil {
			continue
		}
		s.ackSeq++
		s.ackErrs = append(s.ackErrs, shareAckErr{seq: s.ackSeq, topic: r.Topic, part: r.Partition, err: r.Err})
		if len(s.ackErrs) > 1024 {
			s.ackErrs = slices.Delete(s.ackErrs, 0, len(s.ackErrs)-1024)
		}
		s.t.opts.Logger.Warn("kafka: share group refused acknowledgements; the records come back to the group",
			"group", s.group, "topic", r.Topic, "partition", r.Partition, "err", r.Err)
	}
}

// ackMark returns the sequence number of the newest refusal so far.
func (s *shareInstance) ackMark() uint64 {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	return s.ackSeq
}

// refusedSince returns the refusal of partition (topic, part) after mark,
// or nil.
func (s *shareInstance) refusedSince(mark uint64, topic string, part int32) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	for i := len(s.ackErrs) - 1; i >= 0 && s.ackErrs[i].seq > mark; i-- {
		if e := s.ackErrs[i]; e.topic == topic && e.part == part {
			return e.err
		}
	}
	return nil
}

// receiveShare is Receive for a share-group queue: due retry copies first
// (from the queue's consumer group), then the share group's records.
func (t *Transport) receiveShare(ctx context.Context, p *transport.ReceiveParams, spec transport.QueueSpec) ([]*transport.Delivery, error) {
	s, err := t.shareInstance(ctx, spec, p.Consumer)
	if err != nil {
		return nil, err
	}
	// Retry copies and given-back redeliveries (giveBack) come through
	// the queue's consumer group.
	retries, err := t.instance(p.Queue, p.Consumer)
	if err != nil {
		return nil, err
	}
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	limit := max(p.Max, 1)
	s.mu.Lock()
	s.asked = max(s.asked, limit)
	s.mu.Unlock()
	deadline := time.Now().Add(p.Wait)
	isolate := p.IsolateRedeliveries
	for first := true; ; first = false {
		if s.isCancelled() {
			return s.drainTake(ctx, limit), nil
		}
		// What the member acquired first: a crash would take it down.
		if ds := s.take(limit); len(ds) > 0 {
			return ds, nil
		}
		// A cautious runtime (isolate) runs a redelivery alone, across
		// both paths: no retry copy runs while the member holds a record,
		// and (below) the member does not poll while a retry copy runs —
		// a crash of either would take the other down with it.
		if !isolate || !s.holding() {
			ds, err := t.receiveRetries(ctx, retries, limit, isolate)
			if err != nil || len(ds) > 0 {
				return ds, err
			}
		}
		now := time.Now()
		if !first && !now.Before(deadline) {
			return nil, ctx.Err()
		}
		slice := min(deadline.Sub(now), 50*time.Millisecond)
		if isolate && retries.waitIdle(max(slice, 10*time.Millisecond)) {
			continue
		}
		if s.isNarrow() {
			// A narrow poll should outlast a few of the broker's waits:
			// an answer that comes after the poll ended waits in the
			// client for the next poll.
			slice = max(slice, 10*shareFetchWait(true))
		}
		if err := s.fill(ctx, max(slice, 10*time.Millisecond)); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// receiveRetries hands out due retry copies of the queue's retry topics,
// polling the consumer group briefly for new ones.
func (t *Transport) receiveRetries(ctx context.Context, c *instance, limit int, isolate bool) ([]*transport.Delivery, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	ds, err := c.take(ctx, limit, isolate)
	if err != nil || len(ds) > 0 {
		return ds, err
	}
	if c.cl.BufferedFetchRecords() == 0 && time.Since(c.polled) < retryPollEvery {
		// Nothing fetched in the background: no poll, which would wait
		// for its timeout on the share group's path every time (most
		// share queues' retry topics are empty most of the time).
		return nil, nil
	}
	c.polled = time.Now()
	if err := c.poll(ctx, time.Millisecond, limit); err != nil {
		if errors.Is(err, errInstanceClosed) {
			return nil, nil
		}
		return nil, err
	}
	return c.take(ctx, limit, isolate)
}

// retryPollEvery is how often a share-group member polls its retry
// topics' consumer group when nothing is buffered (the poll runs the
// consumer's bookkeeping too).
const retryPollEvery = 100 * time.Millisecond

// take hands out up to limit records of the last poll: first-time
// deliveries in a batch, a redelivered one (count > 1) alone — even to a
// runtime that is not cautious yet: a member died holding it, and the
// poison that killed it may be this one (the poll's other redeliveries
// were given back, giveBack).
func (s *shareInstance) take(limit int) []*transport.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil
	}
	for e := range s.held {
		if e.over {
			// Nothing runs beside a record past the delivery limit until
			// it is dead-lettered: a first-time poison handed out now
			// could kill the process first, and the record would come back
			// past the broker's archive limit and be archived, with no
			// copy anywhere.
			return nil
		}
	}
	var out []*transport.Delivery
	for len(s.buf) > 0 && len(out) < limit {
		e := s.buf[0]
		n := int(e.rec.DeliveryCount())
		if (e.over || n > 1) && (len(out) > 0 || len(s.held) > 0) {
			break // a redelivery runs alone, with nothing else in flight
		}
		s.buf = s.buf[1:]
		e.handed = true
		s.held[e] = struct{}{}
		m := e.msg
		m.Headers = transport.CloneHeaders(e.msg.Headers)
		out = append(out, &transport.Delivery{
			Message: m, Queue: s.key.queue, DeliveryCount: n, EnqueuedAt: e.rec.Timestamp,
			Partition: e.rec.Partition, Offset: e.rec.Offset, HasOffset: true, MessageID: recordID(e.rec),
			Receipt: e,
		})
		if e.over || n > 1 {
			break
		}
	}
	return out
}

// fill polls the share group when everything the last poll returned has
// been settled; otherwise it waits (up to wait) for settlements. A poll's
// first-time deliveries are handed out before its redeliveries. A member
// that received a redelivery turns narrow (one record per fetch) and wide
// again once a first-time delivery comes.
func (s *shareInstance) fill(ctx context.Context, wait time.Duration) error {
	s.mu.Lock()
	if len(s.buf) > 0 || len(s.held) > 0 {
		s.waitSettled(wait)
		s.mu.Unlock()
		return nil
	}
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	cl, gen := s.cl, s.gen
	s.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, wait)
	fs := cl.PollRecords(pctx, -1)
	cancel()
	if fs.IsClientClosed() {
		if s.t.isClosed() {
			return errClosed
		}
		return nil
	}
	fs.EachError(func(topic string, part int32, err error) {
		if !isCtxErr(err) && !errors.Is(err, kgo.ErrClientClosed) {
			s.t.opts.Logger.Warn("kafka: share fetch error; retrying", "group", s.group, "topic", topic, "partition", part, "err", err)
		}
	})
	now := time.Now()
	// Records past the delivery limit first, each alone (take): the
	// runtime dead-letters them without a handler, so nothing can kill the
	// process while one waits behind or beside a first-time poison — held
	// then, it would come back past the broker's archive limit and be
	// archived, with no copy anywhere.
	var over, fresh, again []*shareEntry
	limit := int32(0)
	if spec, ok := s.t.spec(s.key.queue); ok {
		limit = int32(spec.DeliveryLimit)
	}
	fs.EachRecord(func(r *kgo.Record) {
		msg, _ := recordMessage(r)
		e := &shareEntry{s: s, gen: gen, rec: r, msg: msg, renewed: now}
		switch n := r.DeliveryCount(); {
		case limit > 0 && n > limit:
			e.over = true
			over = append(over, e)
		case n > 1:
			again = append(again, e)
		default:
			fresh = append(fresh, e)
		}
	})
	if len(over)+len(fresh)+len(again) == 0 {
		return nil
	}
	// Redeliveries with the lowest count first: a crash-type poison has
	// the highest (it killed every holder), so its neighbours are settled
	// before it runs.
	slices.SortStableFunc(again, func(a, b *shareEntry) int {
		return int(a.rec.DeliveryCount() - b.rec.DeliveryCount())
	})
	// One runs alone; the others go back (giveBack) rather than wait
	// beside it.
	again = s.giveBack(cl, again)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen || s.closing {
		// Stopped or abandoned meanwhile: the records go back with the
		// client (released on close).
		return nil
	}
	// Appended: a record the member rescued from a closed client
	// (rescueLocked) may be waiting already.
	s.buf = append(append(append(s.buf, over...), fresh...), again...)
	// Applied once the poll is settled (reshapeLocked). A narrow member
	// widens only after as many first-time deliveries in a row as the
	// topic has partitions: a crashed member's records come back at the
	// head of their partitions, and the broker serves the partitions in
	// turn, so one fresh record from one partition does not mean the
	// redeliveries are done — and a wide fetch that mixes them holds the
	// others while one of them, the poison, runs.
	if len(over)+len(again) > 0 {
		s.freshStreak = 0
	} else if s.narrow {
		s.freshStreak++
	}
	s.wantNarrow = len(over)+len(again) > 0 || (s.narrow && s.freshStreak < int(max(s.parts, 1)))
	return nil
}

// shareFetchWait is how long the broker may hold a share fetch of a wide
// or a narrow member.
func shareFetchWait(narrow bool) time.Duration {
	if narrow {
		// Next to nothing: a narrow member's fetches go to one broker at
		// a time, so a short wait lets it turn to the next soon.
		return 10 * time.Millisecond
	}
	// Short as well: a flush of acknowledgements waits for the fetch in
	// flight, and every settlement flushes.
	return 150 * time.Millisecond
}

// drainTake is Receive during a graceful stop: what the last poll
// returned, and once nothing is held any more a last poll for what the
// client has already fetched (a fetch from another broker that came in
// after the last poll returned, or one still on its way): the runtime
// processes those too, since closing the client would release them with
// their counts raised. Up to shareDrainPolls such polls, until one brings
// nothing (every fetch it started ended within it). A fetch that arrives
// later still is released.
func (s *shareInstance) drainTake(ctx context.Context, limit int) []*transport.Delivery {
	if ds := s.take(limit); len(ds) > 0 {
		return ds
	}
	s.mu.Lock()
	if len(s.buf) == 0 && len(s.held) > 0 && s.collected < shareDrainPolls {
		// The runtime is still settling what it took: wait for that (the
		// stop waits for its handlers anyway), or a buffered fetch would be
		// released with the client.
		s.waitSettled(s.t.opts.ShareLockDuration)
	}
	idle := len(s.buf) == 0 && len(s.held) == 0 && s.collected < shareDrainPolls
	if idle {
		s.collected++
	}
	narrow := s.narrow
	s.mu.Unlock()
	if !idle {
		return nil
	}
	if err := s.fill(ctx, 2*shareFetchWait(narrow)+50*time.Millisecond); err != nil {
		return nil
	}
	ds := s.take(limit)
	if len(ds) == 0 {
		s.mu.Lock()
		s.collected = shareDrainPolls
		s.mu.Unlock()
	}
	return ds
}

// shareDrainPolls bounds the polls of a graceful stop.
const shareDrainPolls = 4

// isCancelled reports whether a graceful stop began.
func (s *shareInstance) isCancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// holding reports whether the member holds records of its last poll.
func (s *shareInstance) holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf) > 0 || len(s.held) > 0
}

// isNarrow reports whether the member fetches one record at a time.
func (s *shareInstance) isNarrow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.narrow
}

// waitSettled waits, with s.mu held, until nothing of the last poll is
// held (then reconnects if the fetch width must change), or wait passed.
//
// The end of the wait is the timer's firing, not a deadline read from the
// clock: a waiter woken by the timer that found itself a moment short of
// a deadline read after the timer was set slept on, with no one left to
// wake it (a Receive hung for 10 minutes under CI load).
func (s *shareInstance) waitSettled(wait time.Duration) {
	expired := false // written by the timer and read by the waiter, both under s.mu
	timer := afterFunc(wait, func() {
		s.mu.Lock()
		expired = true
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	for (len(s.buf) > 0 || len(s.held) > 0) && !s.closing && !expired {
		s.cond.Wait()
	}
}

// afterFunc is time.AfterFunc; a test fires it at once, whatever the
// clock says, to show that the timer alone ends a wait.
var afterFunc = time.AfterFunc

// settledLocked ends an entry's hand-out; with s.mu held.
func (s *shareInstance) settledLocked(e *shareEntry) {
	e.settled = true
	delete(s.held, e)
	if len(s.held) == 0 && len(s.buf) == 0 {
		s.reshapeLocked()
	}
	s.cond.Broadcast()
}

// reshapeLocked reconnects with the other fetch width when the last poll
// asked for it; only when nothing is held, with s.mu held.
func (s *shareInstance) reshapeLocked() {
	if s.closing || s.cl == nil || s.wantNarrow == s.narrow || s.t.opts.ShareMaxRecords <= 1 {
		return
	}
	if err := s.connect(s.wantNarrow); err != nil {
		s.t.opts.Logger.Warn("kafka: share member could not change its fetch width; it keeps the old one", "group", s.group, "err", err)
		s.wantNarrow = s.narrow
	}
}
