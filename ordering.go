package lily

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// KeyStore keeps the persistent per-key state of a queue whose ordering is
// "park" or "block" (docs/design.md §4): which keys are held, and which one message
// of a held key may pass. *redrive.Keys implements it; the catalog holds
// the parked messages themselves.
//
// A key's states: free (""); "held" — its head was dead-lettered and every
// later message of the key is diverted, in arrival order, into the catalog
// as a parked entry; "waiting" — only the allowed message (a retry copy in
// its bucket, the redriven head, the next parked entry on its way back) may
// pass. When the allowed message succeeds the consumer advances the key:
// the oldest parked entry is sent back and allowed, until none is left.
type KeyStore interface {
	// KeyState returns key's state ("" when free), the allowed event ID
	// and the head's event ID.
	KeyState(ctx context.Context, queue, key string) (state, allowed, head string, err error)
	// HoldKey durably holds key: state "held" with eventID as its head, or
	// "waiting" with eventID as the one message allowed through.
	HoldKey(ctx context.Context, queue, key, mode, state, eventID string) error
	// AdvanceKey sends the key's oldest parked entry back to queue through
	// pub and allows it, or frees the key when none is left.
	AdvanceKey(ctx context.Context, queue, key string, pub transport.Transport) (free bool, err error)
	// ResumeKeys finishes what a crash or an operator left for queue's keys
	// (an allowed entry not sent yet; a blocked key whose head was
	// discarded) and returns how many keys are held.
	ResumeKeys(ctx context.Context, queue string, pub transport.Transport) (held int, err error)
}

// Key states a KeyStore reports.
const (
	keyHeld    = "held"
	keyWaiting = "waiting"
)

// ordered reports whether the queue keeps per-key order.
func (c *Consumer) ordered() bool { return c.o.Queue.Ordering != OrderingReorder }

// orderKey returns what orders d: its message key; with ordering "block" on
// a log (a delivery with an offset: Kafka), its partition — a blocked
// record stops the partition, as log consumers (CDC, event sourcing)
// expect. "" means d is not ordered.
func (c *Consumer) orderKey(d *transport.Delivery) string {
	if c.o.Queue.Ordering == OrderingBlock && d.HasOffset {
		return "partition:" + strconv.Itoa(int(d.Partition))
	}
	return d.Key
}

// checkOrdering validates what ordering "park" and "block" need.
func checkOrdering(t transport.Transport, o ConsumerOptions) error {
	if o.Queue.Ordering == OrderingReorder {
		return nil
	}
	if o.Keys == nil {
		return fmt.Errorf("%w: queue %s: ordering %q needs ConsumerOptions.Keys (the catalog's held keys, *redrive.Keys), where held keys are kept",
			ErrInvalidConfig, o.Queue.Name, o.Queue.Ordering)
	}
	f, _ := t.(transport.Featurer)
	if f == nil || !f.Features().CatalogParking {
		return fmt.Errorf("%w: queue %s: ordering %q needs a transport that parks messages in the catalog: the SQLite transport, or a broker transport wrapped with ledger.Account",
			ErrInvalidConfig, o.Queue.Name, o.Queue.Ordering)
	}
	return nil
}

// queueBehindKey queues j behind the delivery of its key that is being
// processed, if any, and reports whether it did. Messages of one key are
// processed one at a time, in arrival order.
func (c *Consumer) queueBehindKey(key string, j *ticket) bool {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	if q, busy := c.keyQ[key]; busy {
		c.keyQ[key] = append(q, j)
		return true
	}
	c.keyQ[key] = nil
	return false
}

// runKey processes j and then every delivery of the same key queued behind
// it, in order.
func (c *Consumer) runKey(ctx context.Context, key string, j *ticket, settles chan<- settleReq) {
	for {
		c.processKeyed(ctx, key, j, settles)
		c.kmu.Lock()
		q := c.keyQ[key]
		if len(q) == 0 {
			delete(c.keyQ, key)
			c.kmu.Unlock()
			return
		}
		j, c.keyQ[key] = q[0], q[1:]
		c.kmu.Unlock()
	}
}

// processKeyed decides one delivery of an ordered key and settles it
// before the key's next delivery is looked at.
func (c *Consumer) processKeyed(ctx context.Context, key string, j *ticket, settles chan<- settleReq) {
	d, q := j.d, c.o.Queue
	state, allowed, head, err := c.o.Keys.KeyState(ctx, q.Name, key)
	if err != nil {
		c.log.Error("cannot read the key's state; releasing the delivery for redelivery", "key", key, "event_id", d.EventID, "err", err)
		c.settleSync(settles, j, c.releaseReq(d, err))
		return
	}
	through := state == "" || d.EventID == allowed || d.EventID == head
	if !through {
		rc, _ := evidence.RetryCount(d.Headers)
		why := fmt.Errorf("key %q is %s behind %s (ordering %s)", key, state, head, q.Ordering)
		r := c.deadLetter(d, evidence.ReasonParked, why, "", rc, 0)
		r.s.Headers[evidence.HeaderHoldKey] = key
		r.s.Headers[evidence.HeaderHoldMode] = q.Ordering
		c.settleSync(settles, j, r)
		return
	}
	if state == "" && d.DeliveryCount > 1 {
		// A redelivery: its last holder may have died in the handler. Hold
		// the key before trying again, so that if this is a crash-type
		// poison that the broker dead-letters at its delivery limit, the
		// key's later messages still wait behind it.
		if err := c.o.Keys.HoldKey(ctx, q.Name, key, q.Ordering, keyWaiting, d.EventID); err != nil {
			c.log.Error("cannot hold the key; releasing the delivery for redelivery", "key", key, "event_id", d.EventID, "err", err)
			c.settleSync(settles, j, c.releaseReq(d, err))
			return
		}
		state, allowed, head = keyWaiting, d.EventID, d.EventID
	}
	r := c.decide(ctx, j)
	switch r.s.Action {
	case transport.DeadLetter:
		r = c.holdKey(ctx, key, d, keyHeld, state, r)
	case transport.Retry, transport.Release:
		r = c.holdKey(ctx, key, d, keyWaiting, state, r)
	case transport.Ack:
		if state != "" {
			// Advance before the ack: if the ack is lost, the message comes
			// back as a duplicate behind the key, never stuck in front of it.
			free, err := c.o.Keys.AdvanceKey(ctx, q.Name, key, c.t)
			if err != nil {
				c.log.Error("cannot move the key on; releasing the delivery, it will be processed again", "key", key, "event_id", d.EventID, "err", err)
				r = c.releaseReq(d, err) // the attempt's span is the ticket's: it ends with the release
				break
			}
			if free {
				c.log.Info("key flows again: nothing of it is waiting", "key", key)
				c.observe(ctx, Event{Kind: EventKeyReleased, Queue: q.Name, EventID: d.EventID, Key: key})
			}
		}
	}
	c.settleSync(settles, j, r)
}

// holdKey records that d's key is held (its head d was dead-lettered) or
// waiting (d is retried or released and is the one allowed through), before
// r is settled. If that cannot be recorded, d is released instead.
func (c *Consumer) holdKey(ctx context.Context, key string, d *transport.Delivery, to, was string, r settleReq) settleReq {
	q := c.o.Queue
	if err := c.o.Keys.HoldKey(ctx, q.Name, key, q.Ordering, to, d.EventID); err != nil {
		c.log.Error("cannot hold the key; releasing the delivery for redelivery", "key", key, "event_id", d.EventID, "err", err)
		return c.releaseReq(d, err) // the attempt's span is the ticket's: it ends with the release
	}
	if to == keyHeld && was != keyHeld {
		fix := "lily dlq unpark --queue " + q.Name + " --key " + key
		if q.Ordering == OrderingBlock {
			fix = "lily dlq redrive (or discard) the head, entry of event " + d.EventID
		}
		c.log.Warn("key "+q.Ordering+"ed: its later messages wait, in order, until the head is dealt with",
			"key", key, "head", d.EventID, "reason", r.s.Reason, "fix", fix)
		c.observe(ctx, Event{Kind: EventKeyHeld, Queue: q.Name, EventID: d.EventID, Key: key, Reason: r.s.Reason})
	}
	return r
}

// releaseReq gives d back for redelivery.
func (c *Consumer) releaseReq(d *transport.Delivery, err error) settleReq {
	return settleReq{
		s:  transport.Settlement{Delivery: d, Action: transport.Release},
		ev: Event{Kind: EventReleased, Queue: c.o.Queue.Name, EventID: d.EventID, Err: err},
	}
}

// settleSync settles r, the decision for ticket t, through the settler and
// waits for the outcome.
func (c *Consumer) settleSync(settles chan<- settleReq, t *ticket, r settleReq) {
	r.t = t
	r.done = make(chan error, 1)
	settles <- r
	<-r.done
}

// keyPoll finishes left-over key work (ResumeKeys) until ctx is done.
func (c *Consumer) keyPoll(ctx context.Context) {
	t := time.NewTicker(c.o.KeyPoll)
	defer t.Stop()
	for {
		c.resumeKeys(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Consumer) resumeKeys(ctx context.Context) {
	if _, err := c.o.Keys.ResumeKeys(ctx, c.o.Queue.Name, c.t); err != nil && ctx.Err() == nil {
		c.log.Warn("resuming held keys failed; trying again", "err", err)
	}
}
