package azqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/transport"
)

// Settle applies the settlements (in parallel; each in the safe order):
// Ack deletes the message; Retry rewrites it in place (the envelope with
// the retry's headers and dequeue_base) and makes it visible after the
// delay; DeadLetter enqueues a copy with evidence to "<queue>-dlq", then
// deletes the original; Release sets the message's visibility to the delay
// (0: at once). A copy that was not confirmed leaves the original in place
// (it comes back after its visibility timeout). A pop receipt the service
// no longer honours is transport.ErrLeaseLost. Under p.FailRefused a
// dead-letter copy over MaxMessageSize fails with
// transport.ErrDeadLetterRefused, so that ledger.Accounted stores the dead
// letter in the catalog and then acknowledges the original.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	return transport.SettleErrorOf(t.parallelEach(len(p.Settlements), func(i int) error { return t.settle(ctx, &p.Settlements[i], p.FailRefused) }))
}

func (t *Transport) settle(ctx context.Context, s *transport.Settlement, failRefused bool) error {
	d := s.Delivery
	rc, ok := d.Receipt.(*receipt)
	if !ok {
		return fmt.Errorf("azqueue: settle %s: delivery was not received from this transport", d.EventID)
	}
	switch s.Action {
	case transport.Ack:
	case transport.Retry:
		if s.Delay > MaxVisibility {
			return fmt.Errorf("azqueue: retry %s on %s: delay %s exceeds the service's visibility limit of %s: lower the queue's retry delays (max_retry_backoff_millis ≤ 604800000) (original kept)",
				d.EventID, rc.queue, s.Delay, MaxVisibility)
		}
		// The retry's count starts again: the next dequeue is one above
		// the count written here.
		text, err := encode(d.EventID, d.Key, d.Type, d.Body, s.Headers, rc.dequeues)
		if err != nil {
			return fmt.Errorf("azqueue: retry %s: %w (original kept)", d.EventID, err)
		}
		if len(text) > MaxMessageSize {
			return fmt.Errorf("azqueue: retry %s on %s: the message with its retry headers takes %d bytes, over the service's limit of %d (original kept; it dead-letters at its delivery limit)",
				d.EventID, rc.queue, len(text), MaxMessageSize)
		}
		err = t.update(ctx, rc, &text, seconds(s.Delay))
		if err == nil {
			t.unhold(rc)
		}
		return err
	case transport.DeadLetter:
		dlq := DeadLetterQueue(rc.queue)
		text, err := encode(d.EventID, d.Key, d.Type, d.Body, s.Headers, 0)
		if err != nil {
			return fmt.Errorf("azqueue: dead-letter %s: %w (original kept)", d.EventID, err)
		}
		if len(text) > MaxMessageSize && failRefused {
			return fmt.Errorf("azqueue: dead-letter %s: %w: the copy with its evidence takes %d bytes, over the service's message size limit of %d, so %s cannot take it (original kept)",
				d.EventID, transport.ErrDeadLetterRefused, len(text), MaxMessageSize, dlq)
		}
		if err := t.enqueue(ctx, rc.queue+" (its DLQ)", dlq, text, 0); err != nil {
			if failRefused && isTooLarge(err) {
				return fmt.Errorf("azqueue: dead-letter %s to %s: %w: %w (original kept)", d.EventID, dlq, transport.ErrDeadLetterRefused, err)
			}
			return fmt.Errorf("azqueue: dead-letter %s to %s: %w (original kept)", d.EventID, dlq, err)
		}
	case transport.Release:
		err := t.visibility(ctx, rc, seconds(min(s.Delay, MaxVisibility)))
		if err == nil {
			t.unhold(rc)
		}
		return err
	default:
		return fmt.Errorf("azqueue: settle %s: unknown action %d", d.EventID, s.Action)
	}
	if err := t.delete(ctx, rc); err != nil {
		return fmt.Errorf("azqueue: delete %s from %s: %w", d.EventID, rc.queue, err)
	}
	t.unhold(rc)
	return nil
}

// delete deletes a received message with its pop receipt.
func (t *Transport) delete(ctx context.Context, rc *receipt) error {
	c, err := t.client(rc.name)
	if err != nil {
		return err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, err := c.DeleteMessage(ctx, rc.id, rc.pop, nil); err != nil {
		if isLeaseLost(err) {
			t.unhold(rc)
			return fmt.Errorf("%w: %w", transport.ErrLeaseLost, err)
		}
		return err
	}
	return nil
}

// visibility sets a received message's visibility timeout (its text
// unchanged).
func (t *Transport) visibility(ctx context.Context, rc *receipt, secs int32) error {
	return t.update(ctx, rc, nil, secs)
}

// update sets a received message's visibility timeout and, when text is
// not nil, its text (Update Message); the receipt takes the new pop
// receipt.
func (t *Transport) update(ctx context.Context, rc *receipt, text *string, secs int32) error {
	c, err := t.client(rc.name)
	if err != nil {
		return err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	content := rc.text
	if text != nil {
		content = *text
	}
	out, err := c.UpdateMessage(ctx, rc.id, rc.pop, content, &azqueue.UpdateMessageOptions{VisibilityTimeout: &secs})
	if err != nil {
		if isLeaseLost(err) {
			t.unhold(rc)
			return fmt.Errorf("azqueue: update message on %s: %w: %w", rc.queue, transport.ErrLeaseLost, err)
		}
		return fmt.Errorf("azqueue: update message on %s: %w", rc.queue, err)
	}
	rc.pop, rc.text = deref(out.PopReceipt), content
	return nil
}

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

// ExtendLeases sets the visibility timeout of the deliveries to p.For
// (rounded up to whole seconds, at most 7 days) with Update Message.
func (t *Transport) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	secs := seconds(min(p.For, MaxVisibility))
	return transport.SettleErrorOf(t.parallelEach(len(p.Deliveries), func(i int) error {
		rc, ok := p.Deliveries[i].Receipt.(*receipt)
		if !ok {
			return fmt.Errorf("azqueue: extend %s: delivery was not received from this transport", p.Deliveries[i].EventID)
		}
		return t.visibility(ctx, rc, secs)
	}))
}

// RecoverLeases makes every message the consumer instance holds (received
// and not settled, including those kept from an isolated batch) visible at
// once. Their dequeue counts stay raised. It returns how many it released.
func (t *Transport) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	t.mu.Lock()
	var rcs []*receipt
	for rc := range t.held[p.Consumer] {
		rcs = append(rcs, rc)
	}
	t.stash.RemoveConsumer(p.Consumer)
	t.mu.Unlock()
	n := 0
	var errs []error
	for _, rc := range rcs {
		err := t.visibility(ctx, rc, 0)
		switch {
		case err == nil:
			n++
			t.unhold(rc)
		case errors.Is(err, transport.ErrLeaseLost):
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// StopConsumer gives back what the consumer instance received and never
// handed out (kept from an isolated batch): visible again at once, its
// count what it was before that receive (giveBack).
func (t *Transport) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	t.mu.Lock()
	ds := t.stash.Remove(p.Consumer, p.Queue)
	delete(t.wary, p.Consumer)
	t.mu.Unlock()
	var errs []error
	for _, d := range t.giveBack(ctx, ds, false) {
		rc := d.Receipt.(*receipt)
		if err := t.visibility(ctx, rc, 0); err != nil && !errors.Is(err, transport.ErrLeaseLost) {
			errs = append(errs, err)
		}
		t.unhold(rc)
	}
	return errors.Join(errs...)
}

// giveBack makes deliveries that no handler saw visible again at once
// with their count what it was before this receive: each is rewritten in
// place with dequeue_base one higher (the receive that no handler saw does
// not count), keeping its event ID, body and headers. Competing consumers
// make it necessary: when one dies, the service hands what it had received
// out again, dequeue counts raised, and a consumer receiving a batch gets
// several of them at once; kept leased beside the one that runs alone,
// they would die with it if it is the poison, counted once more each time.
// With onlyRedeliveries it gives back the redeliveries of ds alone. It
// returns the deliveries it did not give back (the caller keeps them).
func (t *Transport) giveBack(ctx context.Context, ds []*transport.Delivery, onlyRedeliveries bool) (kept []*transport.Delivery) {
	var back []*transport.Delivery
	for _, d := range ds {
		if onlyRedeliveries && d.DeliveryCount <= 1 {
			kept = append(kept, d)
		} else {
			back = append(back, d)
		}
	}
	errs := t.parallelEach(len(back), func(i int) error {
		d := back[i]
		rc := d.Receipt.(*receipt)
		// Given back even when the consumer is stopping (ctx cancelled).
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		text, err := encode(d.EventID, d.Key, d.Type, d.Body, d.Headers, rc.dequeues+1-int64(d.DeliveryCount))
		if err != nil {
			return err
		}
		if len(text) > MaxMessageSize {
			return fmt.Errorf("the envelope takes %d bytes, over the service's limit of %d", len(text), MaxMessageSize)
		}
		if err := t.update(uctx, rc, &text, 0); err != nil {
			return err
		}
		t.unhold(rc)
		return nil
	})
	for i, err := range errs {
		if err != nil && !errors.Is(err, transport.ErrLeaseLost) {
			t.opts.Logger.Warn("azqueue: could not give back a delivery no handler saw; it stays received", "queue", back[i].Queue, "event_id", back[i].EventID, "err", err)
			kept = append(kept, back[i])
		}
	}
	return kept
}
