package kafka

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily/transport"
)

// heldLocked reports, with s.mu held, whether the entry is still this
// member's: handed out by the current client and not settled.
func (e *shareEntry) heldLocked() error {
	s := e.s
	if s.closing || e.gen != s.gen || e.settled || !e.handed {
		return fmt.Errorf("kafka: %s offset %d: share member stopped or the record was settled; the broker hands it out again: %w",
			recordID(e.rec), e.rec.Offset, transport.ErrLeaseLost)
	}
	return nil
}

// settleShare applies the settlements at idx (share-group deliveries),
// writing their outcomes into errs:
//
//   - Retry and DeadLetter produce the copy (retry topic or dead-letter
//     topic, same key and partition number, acks=all) and only then
//     ACCEPT the original. The original is accepted, not rejected: the
//     copy with evidence is its next home, and a REJECT would, on a
//     broker with KIP-1191's share-group dead-letter queue, write a second
//     copy without Lily's evidence;
//   - Ack ACCEPTs, Release RELEASEs (the broker raises the count at the
//     next delivery; a delay is not supported by share groups);
//
// then the acknowledgements are flushed and the broker's answer awaited.
// A partition whose acknowledgements the broker refused (its lock had
// expired) fails its settlements with transport.ErrLeaseLost: the record
// is handed out again.
func (t *Transport) settleShare(ctx context.Context, ss []transport.Settlement, idx []int, errs []error) {
	var recs []*kgo.Record
	var recOf []int
	for _, i := range idx {
		st := ss[i]
		e := st.Delivery.Receipt.(*shareEntry)
		if e.s.t != t {
			errs[i] = fmt.Errorf("kafka: settle %s: delivery was not received from this transport", st.Delivery.EventID)
			continue
		}
		e.s.mu.Lock()
		err := e.heldLocked()
		e.s.mu.Unlock()
		if err != nil {
			errs[i] = err
			continue
		}
		switch st.Action {
		case transport.Ack, transport.Release:
		case transport.Retry, transport.DeadLetter:
			r, err := t.handOff(ctx, st, e.s.key.queue, e.rec.Partition, e.rec.Offset)
			if err != nil {
				errs[i] = err
				continue
			}
			recs, recOf = append(recs, r), append(recOf, i)
		default:
			errs[i] = fmt.Errorf("kafka: settle %s: unknown action %d", st.Delivery.EventID, st.Action)
		}
	}
	for j, err := range t.produce(ctx, recs) {
		if err != nil {
			st := ss[recOf[j]]
			errs[recOf[j]] = fmt.Errorf("kafka: %s hand-off of %s not confirmed, original kept: %w", st.Action, st.Delivery.EventID, err)
		}
	}
	// Per member: mark, acknowledge, flush, read the refusals — with the
	// member's flush lock held, so that a renewal's refusal flushed at the
	// same time is not taken for this settlement's (the broker reports
	// refusals per partition, not per record).
	byInst := map[*shareInstance][]int{}
	var order []*shareInstance
	for _, i := range idx {
		if errs[i] != nil {
			continue
		}
		s := ss[i].Delivery.Receipt.(*shareEntry).s
		if _, ok := byInst[s]; !ok {
			order = append(order, s)
		}
		byInst[s] = append(byInst[s], i)
	}
	for _, s := range order {
		t.ackShare(ctx, s, ss, byInst[s], errs)
	}
}

// ackShare acknowledges the settlements at idx, all of member s, and
// flushes: ACCEPT, or RELEASE for a Release.
func (t *Transport) ackShare(ctx context.Context, s *shareInstance, ss []transport.Settlement, idx []int, errs []error) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	mark := s.ackMark()
	s.mu.Lock()
	cl := s.cl
	s.mu.Unlock()
	for _, i := range idx {
		status := kgo.AckAccept
		if ss[i].Action == transport.Release {
			status = kgo.AckRelease
		}
		ss[i].Delivery.Receipt.(*shareEntry).rec.Ack(status)
	}
	fctx, cancel := context.WithTimeout(ctx, t.opts.ProduceTimeout)
	flushErr := cl.FlushAcks(fctx)
	cancel()
	if flushErr != nil {
		// The acknowledgements stay queued and go with the next request;
		// the settlements stand (copy confirmed where there is one), as a
		// commit that is retried later does.
		t.opts.Logger.Warn("kafka: flushing share acknowledgements did not finish; they go with the next request", "group", s.group, "err", flushErr)
	}
	for _, i := range idx {
		e := ss[i].Delivery.Receipt.(*shareEntry)
		if err := s.refusedSince(mark, e.rec.Topic, e.rec.Partition); err != nil {
			errs[i] = fmt.Errorf("kafka: share group %s refused the %s of %s (%s): %w; it is handed out again: %w",
				s.group, ss[i].Action, ss[i].Delivery.EventID, recordID(e.rec), err, transport.ErrLeaseLost)
		}
		s.mu.Lock()
		s.settledLocked(e)
		s.mu.Unlock()
	}
}

// renewLoop renews the locks of the records the member holds and has not
// handed out (the runtime extends the handed-out ones, ExtendLeases),
// every fifth of the lock, until the instance ends.
func (s *shareInstance) renewLoop() {
	lock := s.t.opts.ShareLockDuration
	tick := time.NewTicker(lock / 5)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		now := time.Now()
		var rs []*kgo.Record
		s.mu.Lock()
		cl := s.cl
		for _, e := range s.buf {
			if now.Sub(e.renewed) >= lock/5 {
				rs = append(rs, e.rec)
				e.renewed = now
			}
		}
		s.mu.Unlock()
		s.renew(cl, rs)
	}
}

// renew sends RENEW for rs and waits for it to be flushed.
func (s *shareInstance) renew(cl *kgo.Client, rs []*kgo.Record) {
	if len(rs) == 0 {
		return
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	for _, r := range rs {
		r.Ack(kgo.AckRenew)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.t.opts.ShareLockDuration/2)
	defer cancel()
	if err := cl.FlushAcks(ctx); err != nil {
		s.t.opts.Logger.Warn("kafka: renewing share locks did not finish", "group", s.group, "err", err)
	}
}

// ExtendLeases renews (RENEW, KIP-1222) the acquisition locks of
// share-group deliveries still held by their member. Deliveries of a
// consumer group hold no lock and need none: they succeed at once.
func (t *Transport) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	errs := make([]error, len(p.Deliveries))
	byInst := map[*shareInstance][]*kgo.Record{}
	failed := false
	for i, d := range p.Deliveries {
		e, ok := d.Receipt.(*shareEntry)
		if !ok {
			continue
		}
		s := e.s
		s.mu.Lock()
		if err := e.heldLocked(); err != nil {
			errs[i], failed = err, true
		} else {
			byInst[s] = append(byInst[s], e.rec)
			e.renewed = time.Now()
		}
		s.mu.Unlock()
	}
	for s, rs := range byInst {
		s.mu.Lock()
		cl := s.cl
		s.mu.Unlock()
		s.renew(cl, rs)
	}
	if failed {
		return &transport.SettleError{Errs: errs}
	}
	return ctx.Err()
}

// QueueFeatures are the transport's Features for queue: a share-group
// queue's deliveries are leased (the acquisition lock, ShareLockDuration)
// and extended with RENEW.
func (t *Transport) QueueFeatures(queue string) transport.Features {
	f := t.Features()
	if spec, ok := t.spec(queue); ok && spec.ShareGroup != "" {
		f.Leases, f.VisibilityTimeout = true, t.opts.ShareLockDuration
	}
	return f
}

// stop ends the member. With release (a graceful stop), what it polled and
// never handed out is released first; without (abandoned, as if the
// process died) the client just closes and the broker gives every record
// it held back to the group, its count raised at the next delivery. Either
// way a record never handed out that is on the group's last delivery is
// dead-lettered (then accepted) instead: released, the broker would archive
// it. It returns how many records were held.
func (s *shareInstance) stop(release bool) int {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return 0
	}
	s.closing = true
	n := len(s.buf) + len(s.held)
	var last, rs []*kgo.Record
	limit := s.archiveLimit()
	for _, e := range s.buf {
		switch {
		case limit > 0 && int(e.rec.DeliveryCount()) >= limit:
			last = append(last, e.rec)
		case release:
			rs = append(rs, e.rec)
		}
	}
	cl, acq := s.cl, s.acq
	s.buf = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.done)
	if len(last) > 0 {
		s.deadLetterLast(cl, last)
	}
	if len(rs) > 0 {
		// The broker counts a delivery when it hands a record out, so a
		// record no handler saw still comes back with its count raised:
		// share groups have no way to give one back uncounted. The runtime
		// keeps that window small (its lease window).
		cl.MarkAcks(kgo.AckRelease, rs...)
		ctx, cancel := context.WithTimeout(context.Background(), s.t.opts.ProduceTimeout)
		if err := cl.FlushAcks(ctx); err != nil {
			s.t.opts.Logger.Warn("kafka: releasing unhandled share records did not finish; the broker releases them when the member leaves", "group", s.group, "err", err)
		}
		cancel()
	}
	cl.Close()
	s.rescue(acq.unseen())
	s.waitRetired()
	return n
}

// waitRetired waits for the clients a change of width retired (retire) to
// close and to dead-letter what they released on its last delivery, but
// not forever: a close that hangs is reported and left behind.
func (s *shareInstance) waitRetired() {
	done := make(chan struct{})
	go func() {
		s.retiring.Wait()
		close(done)
	}()
	bound := 2 * s.t.opts.ProduceTimeout
	select {
	case <-done:
	case <-time.After(bound):
		s.t.opts.Logger.Error("kafka: a share client retired after a change of fetch width did not close in time; the member stops without it (what it held returns to the group when its session ends)",
			"group", s.group, "waited", bound)
	}
}

// CancelConsume begins a graceful stop of a share-group member: it polls
// no more, and Receive hands out, without waiting, what its last poll
// returned and it did not hand out yet, so that the runtime processes it
// before StopConsumer (a record released instead would come back with its
// count raised: share groups count a delivery when they hand a record
// out). For a consumer-group queue there is nothing pushed to drain: it
// reports errors.ErrUnsupported.
func (t *Transport) CancelConsume(_ context.Context, p *transport.StopParams) error {
	t.mu.Lock()
	s, ok := t.shares[instanceKey{p.Queue, p.Consumer}]
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("kafka: cancel consume of %s: %w", p.Queue, errors.ErrUnsupported)
	}
	s.mu.Lock()
	s.cancelled = true
	s.cond.Broadcast()
	s.mu.Unlock()
	return nil
}

// takeShare removes the share members named consumer (all queues when
// queue is "") from the transport.
func (t *Transport) takeShare(queue, consumer string) []*shareInstance {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*shareInstance
	for k, s := range t.shares {
		if k.name == consumer && (queue == "" || k.queue == queue) {
			out = append(out, s)
			delete(t.shares, k)
		}
	}
	return out
}

// ensureShareGroup sets the share group's share.auto.offset.reset to
// earliest (once per transport): a share group that starts at the log end
// never delivers what was produced before its first member joined.
func (t *Transport) ensureShareGroup(ctx context.Context, group string) error {
	t.mu.Lock()
	done := t.shareReady[group]
	t.mu.Unlock()
	if done {
		return nil
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = "share.auto.offset.reset"
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	cfg.Value = kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, t.prod)
	if err == nil {
		for _, r := range resp.Resources {
			if e := kerr.ErrorForCode(r.ErrorCode); e != nil {
				msg := ""
				if r.ErrorMessage != nil {
					msg = ": " + *r.ErrorMessage
				}
				err = fmt.Errorf("%w%s", e, msg)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: set share.auto.offset.reset = earliest on share group %s (without it the group skips every record produced before it first consumed; share groups need Kafka 4.1+ with share groups enabled): %w", group, err)
	}
	t.mu.Lock()
	t.shareReady[group] = true
	t.mu.Unlock()
	return nil
}

// shareLag counts the share group's records of topic that are not
// completed (neither accepted, released for good nor archived): the
// broker's share-partition lag, or end − start offset where the broker
// reports none. A record the broker archived at its delivery limit is
// completed without being acknowledged by Lily: it leaves this count and
// so shows in the ledger as lost, never as acked.
func (t *Transport) shareLag(ctx context.Context, group, topic string) (int64, error) {
	ends, err := t.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: end offsets of %s: %w", topic, err)
	}
	starts, err := t.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: start offsets of %s: %w", topic, err)
	}
	offs, err := t.adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return 0, fmt.Errorf("kafka: share group offsets of %s: %w", group, err)
	}
	so := offs[group].Offsets
	var n int64
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		o, ok := so.Lookup(e.Topic, e.Partition)
		switch {
		case ok && o.Err == nil && o.Lag >= 0:
			n += o.Lag
			return
		case ok && o.Err == nil && o.StartOffset > from:
			from = o.StartOffset
		}
		if e.Offset > from {
			n += e.Offset - from
		}
	})
	return n, nil
}

// shareGroupOf returns the share group of queue, or "".
func (t *Transport) shareGroupOf(queue string) string {
	if spec, ok := t.spec(queue); ok {
		return spec.ShareGroup
	}
	return ""
}

// retrySubscription is what a share-group queue's consumer group
// subscribes to: only the retry topics (the share group has the main
// topic).
func retrySubscription(queue string) string {
	return `^` + regexp.QuoteMeta(queue) + `\.retry\.[0-9]+ms$`
}
