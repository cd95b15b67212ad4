package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lily-mq/lily/transport"
)

// A hand-off refused by a full target — the dead-letter queue or a retry
// bucket at its max-length, which rejects publishes (x-overflow
// reject-publish) with a basic.nack — is not given up at once: releasing
// the original would raise its x-delivery-count, run the handler again
// for an outcome already decided, and in the end let the broker
// dead-letter it at its delivery limit with none of Lily's evidence. So
// Settle keeps such an original held, unacknowledged on its channel, and
// publishes the copy again with a capped, doubling backoff until the
// target takes it (an operator's `lily dlq ingest` drains the DLQ; a
// bucket drains as its messages expire); then it acknowledges the
// original. A dead-letter copy that was refused says so in
// HeaderDLQFull, so the catalog entry shows that the DLQ was full.
//
// The hold ends without a copy, failing that settlement (the runtime then
// releases the original), when the Settle context ends, when
// Options.RefusedHold has passed, when the transport is closed, or when
// the original's channel dies (transport.ErrLeaseLost: the broker
// redelivers it). Meanwhile the consumer's other settlements of the same
// batch are applied at once; its later batches wait for a settle slot,
// so a consumer whose dead letters are refused slows down to a stop
// instead of turning them into redeliveries: a full DLQ becomes lag.

// HeaderDLQFull is set on a dead-letter copy that the dead-letter queue
// refused at least once because it was full: when, how often, and that the
// original was held meanwhile.
const HeaderDLQFull = "x-lily-dlq-full"

// errHeld marks, inside Settle, a settlement whose copy is being held.
var errHeld = errors.New("rabbitmq: hand-off held")

// heldCopy is a refused copy: the index of its settlement and the message.
type heldCopy struct {
	i       int
	m       outMsg
	refused int
}

// hold publishes the refused copies again until each is confirmed or the
// hold ends (see above), then acknowledges the originals whose copies were
// confirmed. It sets errs for the held settlements.
func (t *Transport) hold(ctx context.Context, ss []transport.Settlement, rcs []receipt, held []heldCopy, errs []error) {
	first := time.Now()
	limit := t.opts.RefusedHold
	backoff := t.opts.RefusedBackoff
	for k := range held {
		held[k].refused = 1
	}
	t.opts.Logger.Warn("rabbitmq: hand-offs refused: the target queue is full (reject-publish); "+
		"holding the originals unacknowledged and publishing the copies again",
		"queue", ss[held[0].i].Delivery.Queue, "refused", len(held), "target", held[0].m.key, "hold_limit", limit)
	var confirmed []int
	for len(held) > 0 {
		timer := time.NewTimer(backoff)
		var stop error
		select {
		case <-ctx.Done():
			stop = ctx.Err()
		case <-timer.C:
		}
		timer.Stop()
		if stop == nil && limit >= 0 && time.Since(first) > limit {
			stop = fmt.Errorf("still refused after the hold limit %s (Options.RefusedHold)", limit)
		}
		if stop == nil && t.isClosed() {
			stop = transport.ErrClosed
		}
		if stop != nil {
			for _, h := range held {
				s := ss[h.i]
				errs[h.i] = fmt.Errorf("rabbitmq: %s hand-off of %s: %w: %s refused it %d times since %s; the original was held and is given up now: %v",
					s.Action, s.Delivery.EventID, ErrNacked, h.m.key, h.refused, first.UTC().Format(time.RFC3339), stop)
			}
			break
		}
		backoff = min(backoff*2, t.opts.RefusedBackoffMax)
		var msgs []outMsg
		var live []heldCopy
		for _, h := range held {
			if err := rcs[h.i].held(); err != nil {
				errs[h.i] = err // the broker requeued the original: no copy
				continue
			}
			if ss[h.i].Action == transport.DeadLetter {
				h.m.pub.Headers[HeaderDLQFull] = fmt.Sprintf("the dead-letter queue %s was full (reject-publish) and refused this copy %d times from %s; the original was held unacknowledged meanwhile",
					h.m.key, h.refused, first.UTC().Format("2006-01-02T15:04:05.000Z"))
				if err := t.fit(&h.m.pub, ss[h.i], rcs[h.i], deadLetterHeadroom); err != nil {
					delete(h.m.pub.Headers, HeaderDLQFull) // the note does not fit: the copy goes without it
				}
			}
			msgs = append(msgs, h.m)
			live = append(live, h)
		}
		held = held[:0]
		for j, err := range t.publish(ctx, msgs) {
			h := live[j]
			switch {
			case err == nil:
				confirmed = append(confirmed, h.i)
			case errors.Is(err, ErrNacked):
				h.refused++
				held = append(held, h)
			default:
				s := ss[h.i]
				errs[h.i] = fmt.Errorf("rabbitmq: %s hand-off of %s (held after the target refused it): %w", s.Action, s.Delivery.EventID, err)
			}
		}
	}
	if len(confirmed) == 0 {
		return
	}
	t.opts.Logger.Info("rabbitmq: held hand-offs accepted after the target had refused them",
		"queue", ss[confirmed[0]].Delivery.Queue, "accepted", len(confirmed), "held_for", time.Since(first).Round(time.Millisecond))
	sub := make([]transport.Settlement, len(confirmed))
	subRcs := make([]receipt, len(confirmed))
	subErrs := make([]error, len(confirmed))
	for j, i := range confirmed {
		sub[j], subRcs[j] = ss[i], rcs[i]
	}
	settleOriginals(sub, subRcs, subErrs)
	for j, i := range confirmed {
		errs[i] = subErrs[j]
	}
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}
