package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

// Settle applies settlements in the safe order: the retry and dead-letter
// copies of the whole batch are published (mandatory, confirmed) first;
// then each original whose copy was confirmed is acknowledged. An original
// whose copy failed stays unacknowledged, with the failure in the
// *transport.SettleError. A receipt whose channel already died (the
// broker requeued the original) fails with transport.ErrLeaseLost before
// any copy is made. A copy refused because its target is full is
// published again while its original stays held (see hold.go): that Settle
// call returns once the target took it, or the hold ended — except a
// dead-letter copy under p.FailRefused, which fails at once with
// transport.ErrDeadLetterRefused (as does one that cannot fit in frame_max):
// the caller (ledger.Accounted) stores the dead letter in the catalog.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	n := len(p.Settlements)
	if n == 0 {
		return nil
	}
	errs := make([]error, n)
	rcs := make([]receipt, n)
	var copies []outMsg
	var copyOf []int
	for i, s := range p.Settlements {
		rc, ok := s.Delivery.Receipt.(receipt)
		if !ok {
			errs[i] = fmt.Errorf("rabbitmq: settle %s: delivery was not received from this transport", s.Delivery.EventID)
			continue
		}
		rcs[i] = rc
		if s.Action != transport.Retry && s.Action != transport.DeadLetter {
			continue
		}
		// A receipt whose channel died is void: the broker requeued the
		// original and redelivers it, so a copy now would be a duplicate.
		if err := rc.held(); err != nil {
			errs[i] = err
			continue
		}
		m, err := t.handOff(s, rc)
		if err != nil {
			if p.FailRefused && s.Action == transport.DeadLetter && errors.Is(err, ErrFrameTooLarge) {
				err = refused(s, err)
			}
			errs[i] = err
			continue
		}
		copies = append(copies, m)
		copyOf = append(copyOf, i)
	}
	var held []heldCopy
	if len(copies) > 0 {
		for j, err := range t.publish(ctx, copies) {
			i := copyOf[j]
			switch {
			case err == nil:
			case p.FailRefused && p.Settlements[i].Action == transport.DeadLetter &&
				(errors.Is(err, ErrNacked) || errors.Is(err, ErrFrameTooLarge)):
				// The caller stores it elsewhere (the catalog) and then
				// acknowledges the original: nothing is held.
				errs[i] = refused(p.Settlements[i], err)
			case errors.Is(err, ErrNacked):
				// The target is full: hold the original (see hold.go).
				held = append(held, heldCopy{i: i, m: copies[j]})
				errs[i] = errHeld
			default:
				errs[i] = fmt.Errorf("rabbitmq: %s hand-off of %s: %w", p.Settlements[i].Action, p.Settlements[i].Delivery.EventID, err)
			}
		}
	}
	settleOriginals(p.Settlements, rcs, errs)
	if len(held) > 0 {
		t.hold(ctx, p.Settlements, rcs, held, errs)
	}
	failed := 0
	for i := range errs {
		if errs[i] != nil {
			failed++
		}
	}
	if failed > 0 {
		return &transport.SettleError{Errs: errs}
	}
	return nil
}

// refused is the error of a dead-letter copy the broker refused for good
// (SettleParams.FailRefused): it says what was refused, and wraps
// transport.ErrDeadLetterRefused and the broker's answer.
func refused(s transport.Settlement, err error) error {
	dlq := DeadLetterQueue(s.Delivery.Queue)
	why := "the dead-letter queue " + dlq + " is full (x-max-length with reject-publish) and refused the copy"
	if errors.Is(err, ErrFrameTooLarge) {
		why = "the dead-letter copy's headers exceed the connection's frame_max even with Lily's evidence cut down, so " + dlq + " cannot take it"
	}
	return fmt.Errorf("rabbitmq: dead-letter hand-off of %s: %w: %s: %w", s.Delivery.EventID, transport.ErrDeadLetterRefused, why, err)
}

// handOff builds the copy of a Retry (to the delay bucket, through the
// retry exchange) or a DeadLetter (to the dead-letter queue, through the
// dead-letter exchange).
func (t *Transport) handOff(s transport.Settlement, rc receipt) (outMsg, error) {
	spec, err := t.spec(s.Delivery.Queue)
	if err != nil {
		return outMsg{}, err
	}
	m := s.Delivery.Message
	m.Headers = s.Headers
	pub, err := publishing(m, rc.raw)
	if err != nil {
		return outMsg{}, err
	}
	out := outMsg{exchange: DeadLetterExchange(spec.Exchange), key: spec.Name, pub: pub}
	headroom := deadLetterHeadroom
	if s.Action == transport.Retry {
		ms := s.Delay.Milliseconds()
		if !slices.Contains(spec.BucketsMillis, ms) {
			return outMsg{}, fmt.Errorf("rabbitmq: retry of %s after %dms: queue %s has no such bucket (buckets %v): the runtime and topology disagree", m.EventID, ms, spec.Name, spec.BucketsMillis)
		}
		out.exchange, out.key = RetryExchange(spec.Exchange), BucketQueue(spec.Name, ms)
		headroom = retryHeadroom(out.key, spec.Name)
	}
	if err := t.fit(&out.pub, s, rc, headroom); err != nil {
		return outMsg{}, err
	}
	return out, nil
}

// fit makes the copy's header frame fit in frame_max less headroom by
// cutting Lily's evidence (fitEvidence), and logs what it did.
func (t *Transport) fit(pub *amqp.Publishing, s transport.Settlement, rc receipt, headroom int) error {
	frameMax := t.frameMax()
	cut, err := fitEvidence(pub, rc.raw.Headers, frameMax, headroom)
	if err != nil {
		t.opts.Logger.Error("rabbitmq: hand-off refused before publishing: the copy's headers do not fit in frame_max; the connection is untouched",
			"queue", s.Delivery.Queue, "event_id", s.Delivery.EventID, "action", s.Action.String(), "err", err)
		return fmt.Errorf("rabbitmq: %s hand-off of %s from %s: %w", s.Action, s.Delivery.EventID, s.Delivery.Queue, err)
	}
	if len(cut) > 0 {
		t.opts.Logger.Warn("rabbitmq: evidence cut down so that the copy fits in frame_max (original headers untouched)",
			"queue", s.Delivery.Queue, "event_id", s.Delivery.EventID, "action", s.Action.String(),
			"frame_max", frameMax, "headroom", headroom, "cut", strings.Join(cut, ","))
	}
	return nil
}

// settleOriginals acknowledges (Ack, and Retry or DeadLetter whose copy
// was confirmed) or releases (Release) the originals of ss whose errs entry
// is still nil, recording each failure in errs. The work is grouped per
// consumer so that each consumer's lock is taken once per batch and its
// acknowledgements can be combined (see consumer.settle).
func settleOriginals(ss []transport.Settlement, rcs []receipt, errs []error) {
	var groups []*settleGroup
	for i, s := range ss {
		if errs[i] != nil {
			continue
		}
		var g *settleGroup
		for _, x := range groups {
			if x.c == rcs[i].c {
				g = x
				break
			}
		}
		if g == nil {
			g = &settleGroup{c: rcs[i].c}
			groups = append(groups, g)
		}
		switch s.Action {
		case transport.Ack, transport.Retry, transport.DeadLetter:
			g.acks = append(g.acks, i)
		case transport.Release:
			g.nacks = append(g.nacks, i)
		default:
			errs[i] = fmt.Errorf("rabbitmq: settle %s: unknown action %d", s.Delivery.EventID, s.Action)
		}
	}
	for _, g := range groups {
		g.c.settle(rcs, g.acks, g.nacks, errs)
	}
}

// settleGroup is the part of a batch held by one consumer: indexes into
// the batch of the originals to acknowledge and to release.
type settleGroup struct {
	c           *consumer
	acks, nacks []int
}

// SettleConcurrency is the number of Settle calls that make progress in
// parallel: one per confirm-mode publisher channel (Options.Publishers).
func (t *Transport) SettleConcurrency() int { return t.opts.Publishers }
