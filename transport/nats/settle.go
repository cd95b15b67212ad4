package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Settle applies the settlements, each in the safe order: Ack
// acknowledges the message; Retry writes its retry record (confirmed) and
// then NAKs it with the delay (NakWithDelay); DeadLetter publishes a copy
// with the evidence to the queue's dead-letter stream, confirmed by its
// PubAck, and then terminates the original (AckTerm); Release NAKs it
// (with the delay, if any). The copies of a batch are published together
// and their PubAcks awaited together; acknowledgements are one-way in
// NATS, so Settle returns once the server has read them (a flush). A copy
// that was not confirmed leaves the original leased; it comes back after
// AckWait. Under p.FailRefused a dead-letter copy that the dead-letter
// stream refuses (full at dlq_max_length, or over max_payload) fails with
// transport.ErrDeadLetterRefused.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	n := len(p.Settlements)
	errs := make([]error, n)
	sent := make([]bool, n)
	futures := make([]jetstream.PubAckFuture, n)
	rcs := make([]*receipt, n)
	for i := range p.Settlements {
		s := &p.Settlements[i]
		rc, ok := s.Delivery.Receipt.(*receipt)
		if !ok {
			errs[i] = fmt.Errorf("nats: settle %s: delivery was not received from this transport", s.Delivery.EventID)
			continue
		}
		rcs[i] = rc
		var m *natsgo.Msg
		switch s.Action {
		case transport.Retry:
			m, errs[i] = retryMsg(rc, s.Headers)
		case transport.DeadLetter:
			m, errs[i] = deadLetterMsg(rc, s.Delivery, s.Headers)
		}
		if m != nil && errs[i] == nil {
			futures[i], errs[i] = t.js.PublishMsgAsync(m)
			errs[i] = t.copyErr(s, rc, errs[i], p.FailRefused)
		}
	}
	// Every copy is awaited, even when the caller is stopping: a copy
	// stored but not known would be made again when its original comes
	// back.
	for i, f := range futures {
		if f == nil || errs[i] != nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			if p.Settlements[i].Action == transport.Retry {
				rcs[i].retrySeq = ack.Sequence
			}
		case err := <-f.Err():
			errs[i] = t.copyErr(&p.Settlements[i], rcs[i], err, p.FailRefused)
		}
	}
	for i := range p.Settlements {
		if errs[i] == nil {
			sent[i], errs[i] = t.finish(ctx, &p.Settlements[i], rcs[i])
		}
	}
	// The acks are sent: confirm them even when the caller is stopping.
	if err := t.confirm(context.WithoutCancel(ctx)); err != nil {
		for i := range errs {
			if sent[i] && errs[i] == nil {
				errs[i] = err
			}
		}
	}
	failed := false
	var settled []*receipt // for good: their retry records go
	for i, err := range errs {
		if err != nil {
			failed = true
			continue
		}
		t.unhold(rcs[i])
		if a := p.Settlements[i].Action; a == transport.Ack || a == transport.DeadLetter {
			settled = append(settled, rcs[i])
		}
	}
	t.dropRetries(context.WithoutCancel(ctx), settled)
	if failed {
		return &transport.SettleError{Errs: errs}
	}
	return nil
}

// copyErr names a failed copy of a Retry or DeadLetter (nil stays nil).
func (t *Transport) copyErr(s *transport.Settlement, rc *receipt, err error, failRefused bool) error {
	switch {
	case err == nil:
		return nil
	case s.Action == transport.Retry:
		return fmt.Errorf("nats: write retry record %s: %w (message kept)", retrySubject(rc.b, rc.seq), err)
	case failRefused && isRefusal(err):
		return fmt.Errorf("nats: dead-letter %s to %s: %w: %w (original kept)", s.Delivery.EventID, DeadLetterStream(rc.queue), transport.ErrDeadLetterRefused, err)
	}
	return fmt.Errorf("nats: dead-letter %s to %s: %w (original kept)", s.Delivery.EventID, DeadLetterStream(rc.queue), publishErr(err))
}

// finish sends a settlement's acknowledgement, its copy (if any) being
// stored; sent reports that one went out, to be confirmed.
func (t *Transport) finish(ctx context.Context, s *transport.Settlement, rc *receipt) (sent bool, err error) {
	d := s.Delivery
	switch s.Action {
	case transport.Ack:
		if err := t.ack(rc, ackAck); err != nil {
			return false, fmt.Errorf("nats: ack %s on %s: %w", d.EventID, rc.queue, err)
		}
	case transport.Retry:
		if err := t.nak(rc, s.Delay); err != nil {
			return false, fmt.Errorf("nats: nak %s on %s with delay %s: %w", d.EventID, rc.queue, s.Delay, err)
		}
	case transport.DeadLetter:
		if err := t.ack(rc, ackTerm); err != nil {
			return false, fmt.Errorf("nats: terminate %s on %s after its dead-letter copy was stored: %w", d.EventID, rc.queue, err)
		}
	case transport.Release:
		if err := t.nak(rc, s.Delay); err != nil {
			return false, fmt.Errorf("nats: release %s on %s: %w", d.EventID, rc.queue, err)
		}
	default:
		return false, fmt.Errorf("nats: settle %s: unknown action %d", d.EventID, s.Action)
	}
	return true, nil
}

// deadLetterMsg is d's dead-letter copy, with the evidence headers h.
func deadLetterMsg(rc *receipt, d *transport.Delivery, h transport.Headers) (*natsgo.Msg, error) {
	hdr, err := encodeHeaders(d.Message, h)
	if err != nil {
		return nil, fmt.Errorf("nats: dead-letter %s: %w (original kept)", d.EventID, err)
	}
	return &natsgo.Msg{Subject: DeadLetterSubject(rc.queue), Header: hdr, Data: d.Body}, nil
}

// SettleConcurrency lets the runtime keep several Settle calls in flight:
// each publishes its copies and awaits its own PubAcks.
func (t *Transport) SettleConcurrency() int { return 4 }

func (t *Transport) unhold(rc *receipt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.held[rc.consumer]; h != nil {
		delete(h, rc)
		if len(h) == 0 {
			delete(t.held, rc.consumer)
		}
	}
}

// ExtendLeases restarts the deliveries' AckWait with InProgress (JetStream
// extends by AckWait, whatever p.For asks; the runtime extends well before
// it runs out).
func (t *Transport) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	errs := make([]error, len(p.Deliveries))
	failed := false
	for i, d := range p.Deliveries {
		rc, ok := d.Receipt.(*receipt)
		if !ok {
			errs[i], failed = fmt.Errorf("nats: extend %s: delivery was not received from this transport", d.EventID), true
			continue
		}
		if err := t.ack(rc, ackProgress); err != nil {
			errs[i], failed = fmt.Errorf("nats: extend the lease of %s on %s: %w", d.EventID, rc.queue, err), true
		}
	}
	if err := t.confirm(ctx); err != nil {
		return err
	}
	if failed {
		return &transport.SettleError{Errs: errs}
	}
	return nil
}

// RecoverLeases NAKs every message the consumer instance holds (received
// and not settled, including those kept from an isolated batch): the
// server hands them out again at once, their NumDelivered raised. It
// returns how many it gave back.
func (t *Transport) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	t.mu.Lock()
	var rcs []*receipt
	for rc := range t.held[p.Consumer] {
		rcs = append(rcs, rc)
	}
	delete(t.held, p.Consumer)
	t.stash.RemoveConsumer(p.Consumer)
	t.mu.Unlock()
	t.dropPulls(p.Consumer, "")
	n := 0
	var errs []error
	for _, rc := range rcs {
		if err := t.nak(rc, 0); err != nil {
			errs = append(errs, fmt.Errorf("nats: give back a delivery of %s: %w", rc.queue, err))
			continue
		}
		n++
	}
	if err := t.confirm(ctx); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// StopConsumer gives back what the consumer instance received and never
// handed out (kept from an isolated batch, or waiting in its pull inbox):
// NAKed, handed out again at once. The server counted their delivery
// already; it cannot be undone.
func (t *Transport) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	t.mu.Lock()
	ds := t.stash.Remove(p.Consumer, p.Queue)
	delete(t.wary, p.Consumer)
	t.mu.Unlock()
	t.dropPulls(p.Consumer, p.Queue)
	var errs []error
	for _, d := range ds {
		rc := d.Receipt.(*receipt)
		if err := t.nak(rc, 0); err != nil {
			errs = append(errs, fmt.Errorf("nats: give back a delivery of %s: %w", rc.queue, err))
		}
		t.unhold(rc)
	}
	if len(ds) > 0 {
		if err := t.confirm(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// giveBack takes the redeliveries pulled beside one that is about to run
// alone off this consumer and returns those it did not give back (first
// deliveries, and redeliveries it could not give back), which the caller
// keeps leased for its next receives. Kept leased while the one runs
// alone, they would die with it if it is the poison, counted once more
// each time, until they reach delivery_limit beside it; NAKed, the server
// would count their next delivery too. So each is published again to its
// subject as a copy carrying its hand-outs so far in
// evidence.HeaderPriorDeliveries (less this one, which no handler saw),
// and the original is acknowledged once the copy is stored. On an adopted
// stream a copy is made only when its subject reaches Lily's consumer
// alone (as a Direct publish checks): another consumer of the subject
// would get the copy as a new message. A redelivery whose subject does not
// stays received, to run alone later.
func (t *Transport) giveBack(ctx context.Context, ds []*transport.Delivery) (kept []*transport.Delivery) {
	var back []*transport.Delivery
	alone := map[string]error{} // subject -> why a copy to it would not reach Lily's consumer alone
	for _, d := range ds {
		rc := d.Receipt.(*receipt)
		if d.DeliveryCount <= 1 {
			kept = append(kept, d)
			continue
		}
		if _, adopted := t.opts.Queues[rc.queue]; adopted {
			err, checked := alone[rc.msg.Subject]
			if !checked {
				err = t.Foreign(rc.b.Stream, rc.b.Consumer, "").alone(ctx, rc.msg.Subject)
				alone[rc.msg.Subject] = err
			}
			if err != nil {
				t.opts.Logger.Warn("nats: a redelivery pulled beside one that runs alone is not given back: a copy would reach other consumers too; it stays received and runs alone later",
					"queue", rc.queue, "event_id", d.EventID, "err", err)
				kept = append(kept, d)
				continue
			}
		}
		back = append(back, d)
	}
	if len(back) == 0 {
		return kept
	}
	acked := make([]bool, len(back))
	var wg sync.WaitGroup
	for i, d := range back {
		wg.Go(func() {
			rc := d.Receipt.(*receipt)
			h := transport.CloneHeaders(d.Headers)
			h[evidence.HeaderPriorDeliveries] = evidence.CarriedDeliveries(d.DeliveryCount)
			hdr, err := encodeHeaders(d.Message, h)
			if err == nil {
				// Stored even if the consumer is stopping: the copy is
				// the message once the original is acknowledged.
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				// The message's own subject: the binding's may be a
				// filter with wildcards (an adopted consumer).
				_, err = t.js.PublishMsg(pctx, &natsgo.Msg{Subject: rc.msg.Subject, Header: hdr, Data: d.Body})
			}
			if err != nil {
				t.opts.Logger.Warn("nats: could not give back a redelivery pulled beside one that runs alone; it stays received and runs alone later",
					"queue", rc.queue, "event_id", d.EventID, "err", err)
				return
			}
			if err := t.ack(rc, ackAck); err != nil {
				t.opts.Logger.Warn("nats: a given-back redelivery's original could not be acknowledged; it may come back beside its copy (same event ID)",
					"queue", rc.queue, "event_id", d.EventID, "err", err)
			}
			t.dropRetries(context.WithoutCancel(ctx), []*receipt{rc})
			acked[i] = true
		})
	}
	wg.Wait()
	for i, d := range back {
		if acked[i] {
			t.unhold(d.Receipt.(*receipt))
		} else {
			kept = append(kept, d)
		}
	}
	return kept
}
