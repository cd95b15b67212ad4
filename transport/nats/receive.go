package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// receipt is a delivery's settlement handle.
type receipt struct {
	msg      *natsgo.Msg
	queue    string
	consumer string
	b        Binding
	seq      uint64 // stream sequence
	// delivered is the server's NumDelivered of this hand-out.
	delivered uint64
	// retrySeq is the sequence of the message's retry record (0: none).
	retrySeq uint64
}

// Receive pulls up to p.Max messages (at most Options.MaxBatch) from the
// queue's consumer, waiting up to p.Wait (at most Options.MaxWait) for
// the first. The delivery count is the server's NumDelivered, counted from
// the message's last retry (its retry record) or carried by a give-back
// copy. With IsolateRedeliveries a batch is cut before its first
// redelivery, which then comes alone, and after a redelivery the consumer
// pulls one message at a time until a first delivery comes again — and so
// does a new consumer instance (its predecessor may have died holding a
// batch).
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	t.mu.Lock()
	kept := t.stash.Take(p)
	t.mu.Unlock()
	if len(kept) > 0 {
		return kept, nil
	}
	c, b, err := t.consumer(ctx, p.Queue)
	if err != nil {
		return nil, err
	}
	n := min(max(p.Max, 1), t.opts.MaxBatch)
	if mp := c.CachedInfo().Config.MaxAckPending; mp > 0 {
		// The server refuses a pull for more than MaxAckPending (409): an
		// ordered queue's consumer hands out one message at a time.
		n = min(n, mp)
	}
	if p.KeyOrder {
		n = 1 // per-key order: the consumer's MaxAckPending is 1 (Declare)
	}
	t.mu.Lock()
	if wary, seen := t.wary[p.Consumer]; p.IsolateRedeliveries && (wary || !seen) {
		// After a crash the dead consumer's messages come back together,
		// each counted once more; pulled as a batch, a poison among them
		// would take every innocent one to its count.
		n = 1
	}
	t.mu.Unlock()
	if ctx.Err() != nil {
		return nil, nil
	}
	// A pull is never cut short by the caller's context: a message the
	// server sent to a pull whose reader left would be leased to nobody
	// until AckWait, its count raised.
	msgs, err := t.pull(b, p.Consumer, p.Queue, n, min(p.Wait, t.opts.MaxWait))
	if err != nil {
		t.forget(p.Queue)
		err = fmt.Errorf("nats: receive from %s (stream %s, consumer %s): %w", p.Queue, b.Stream, b.Consumer, err)
		if len(msgs) == 0 {
			return nil, err
		}
		// What came before the error is handed out: dropped, it would be
		// leased to nobody until AckWait, its count raised.
		t.opts.Logger.Warn("nats: a pull ended early; handing out what it brought", "queue", p.Queue, "received", len(msgs), "err", err)
	}
	ds := t.deliveries(ctx, p.Queue, p.Consumer, b, msgs)
	t.mu.Lock()
	h := t.held[p.Consumer]
	if h == nil {
		h = map[*receipt]struct{}{}
		t.held[p.Consumer] = h
	}
	for _, d := range ds {
		h[d.Receipt.(*receipt)] = struct{}{}
	}
	var extra []*transport.Delivery
	if len(ds) > n {
		// A request kept from an earlier receive asked for more than this
		// one does: the rest is kept, leased, for the next receives, after
		// what this batch keeps.
		ds, extra = ds[:n], ds[n:]
	}
	if !p.IsolateRedeliveries || len(ds) == 0 {
		t.keep(p.Consumer, p.Queue, extra)
		t.mu.Unlock()
		return ds, nil
	}
	cut := transport.Isolate(ds)
	// The batch held a redelivery: it starts with one, or Isolate cut before one.
	t.wary[p.Consumer] = cut < len(ds) || ds[0].DeliveryCount > 1
	if cut == len(ds) {
		t.keep(p.Consumer, p.Queue, extra)
		t.mu.Unlock()
		return ds, nil
	}
	t.mu.Unlock()
	rest := t.giveBack(ctx, ds[cut:])
	t.mu.Lock()
	t.keep(p.Consumer, p.Queue, append(rest, extra...))
	t.mu.Unlock()
	return ds[:cut], nil
}

// keep stashes ds, received and not handed out, for the next receives of
// consumer on queue, their leases extended (InProgress every fifth of
// AckWait) until none is kept. t.mu is held.
func (t *Transport) keep(consumer, queue string, ds []*transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	t.stash.Put(consumer, queue, ds)
	t.stash.KeepLeases(&t.mu, t.opts.AckWait/5, func() bool { return t.closed }, func(d *transport.Delivery) {
		rc := d.Receipt.(*receipt)
		if err := t.ack(rc, ackProgress); err != nil {
			t.opts.Logger.Warn("nats: extending the lease of a delivery kept for a later receive failed", "queue", rc.queue, "err", err)
		}
	})
}

// deliveries converts a pull's messages, in order. The retry records of
// its redeliveries are read together (a request each, all in flight at
// once), not one round trip after another. A message that cannot be read
// is left out: it stays leased and comes back after AckWait.
func (t *Transport) deliveries(ctx context.Context, queue, consumer string, b Binding, msgs []*natsgo.Msg) []*transport.Delivery {
	out := make([]*transport.Delivery, len(msgs))
	errs := make([]error, len(msgs))
	inFlight := make(chan struct{}, maxPipelined)
	var wg sync.WaitGroup
	for i, m := range msgs {
		if meta, err := m.Metadata(); err != nil || meta.NumDelivered <= 1 || len(msgs) == 1 {
			out[i], errs[i] = t.delivery(ctx, queue, consumer, b, m) // no record to read, or one alone
			continue
		}
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			out[i], errs[i] = t.delivery(ctx, queue, consumer, b, m)
		})
	}
	wg.Wait()
	ds := make([]*transport.Delivery, 0, len(msgs))
	for i, d := range out {
		if errs[i] != nil {
			t.opts.Logger.Warn("nats: a delivery could not be read (its metadata or retry record); it comes back after AckWait", "queue", queue, "err", errs[i])
			continue
		}
		ds = append(ds, d)
	}
	return ds
}

// delivery converts a pulled message, reading its retry record when the
// server delivered it before.
func (t *Transport) delivery(ctx context.Context, queue, consumer string, b Binding, m *natsgo.Msg) (*transport.Delivery, error) {
	meta, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("nats: metadata of a message of %s: %w", queue, err)
	}
	dec := decodeHeaders(m.Header)
	rc := &receipt{msg: m, queue: queue, consumer: consumer, b: b, seq: meta.Sequence.Stream, delivered: meta.NumDelivered}
	count := int(meta.NumDelivered)
	if meta.NumDelivered > 1 {
		rec, ok, err := t.readRetry(ctx, b, rc.seq)
		switch {
		case errors.Is(err, errUnreadableRecord) || errors.Is(err, jetstream.ErrStreamNotFound):
			// A record no retry can read: handed out with the server's
			// whole count rather than skipped — skipped, it would come back
			// forever (MaxDeliver is -1) with no record; counted high, the
			// delivery limit dead-letters it with its evidence at worst.
			t.opts.Logger.Warn("nats: a redelivery's retry record cannot be read; its delivery count is the server's, retries included",
				"queue", queue, "stream_seq", rc.seq, "num_delivered", meta.NumDelivered, "err", err)
		case err != nil:
			// A failed request (a timeout under load): the message comes
			// back after AckWait and its record is read then.
			return nil, err
		}
		if ok {
			// Retried: the headers of the retry (x-retry-count, the
			// attempt history), and a count that starts again.
			dec.Headers, rc.retrySeq = rec.headers, rec.seq
			count = int(meta.NumDelivered - min(rec.base, meta.NumDelivered-1))
		}
	}
	count += evidence.TakePriorDeliveries(dec.Headers)
	id := dec.EventID
	if id == "" {
		id = messageID(dec.Headers, b.Stream, rc.seq)
	}
	return &transport.Delivery{
		Message:       transport.Message{EventID: id, Key: dec.Key, Type: dec.Type, Body: m.Data, Headers: dec.Headers},
		Queue:         queue,
		DeliveryCount: count,
		EnqueuedAt:    meta.Timestamp,
		MessageID:     fmt.Sprintf("%s:%d", b.Stream, rc.seq),
		Receipt:       rc,
	}, nil
}

// messageID is the event ID of a message without Lily's: the producer's
// Nats-Msg-Id, else its place in the stream ("<stream>:<sequence>").
func messageID(h transport.Headers, stream string, seq uint64) string {
	if id, ok := h["Nats-Msg-Id"].(string); ok && id != "" {
		return id
	}
	return fmt.Sprintf("%s:%d", stream, seq)
}
