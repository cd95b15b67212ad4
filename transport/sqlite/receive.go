package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/lily-mq/lily/transport"
)

// receipt fences a settlement: the row must still carry the receive count
// it had when leased, or another consumer has it now.
type receipt struct {
	id    int64
	count int
}

// Receive leases up to p.Max ready messages, waiting up to p.Wait for one.
// The lease and the receive-count increment are one transaction.
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	limit := max(p.Max, 1)
	var deadline time.Time
	if p.Wait > 0 {
		deadline = time.Now().Add(p.Wait)
	}
	for {
		wake, err := t.waiter()
		if err != nil {
			return nil, err
		}
		ds, next, err := t.lease(ctx, p, limit)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		if p.Wait <= 0 {
			return nil, nil
		}
		sleep := time.Until(deadline)
		if sleep <= 0 {
			return nil, nil
		}
		sleep = min(sleep, t.opts.PollInterval)
		if now := t.now(); next > now {
			// A visible message that waits behind an older one of its key
			// (KeyOrder) makes next <= now: the poll interval, or a wake,
			// decides then.
			sleep = min(sleep, time.Duration(next-now)*time.Millisecond)
		}
		timer := time.NewTimer(max(sleep, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-t.done:
			timer.Stop()
			return nil, transport.ErrClosed
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

type candidate struct {
	id    int64
	count int
}

// lease takes the ready messages; when none is ready it returns the time the
// next one becomes visible (0 if the queue is empty).
func (t *Transport) lease(ctx context.Context, p *transport.ReceiveParams, limit int) ([]*transport.Delivery, int64, error) {
	now := t.now()
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite transport: receive: %w", err)
	}
	defer tx.Rollback()
	query := `SELECT id, receive_count FROM lily_messages
		WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, id LIMIT ?`
	if p.KeyOrder {
		// A keyed message waits while an older one of its key is still here
		// (leased, perhaps by a consumer that died, or delayed).
		query = `SELECT id, receive_count FROM lily_messages m
		WHERE queue = ? AND visible_at <= ? AND (msg_key = '' OR NOT EXISTS (
			SELECT 1 FROM lily_messages o WHERE o.queue = m.queue AND o.msg_key = m.msg_key AND o.msg_key != '' AND o.id < m.id))
		ORDER BY visible_at, id LIMIT ?`
	}
	rows, err := tx.QueryContext(ctx, query, p.Queue, now, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite transport: receive from %s: %w", p.Queue, err)
	}
	cands := make([]candidate, 0, limit)
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.count); err != nil {
			rows.Close()
			return nil, 0, err
		}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(cands) == 0 {
		var next *int64
		if err := tx.QueryRowContext(ctx, `SELECT MIN(visible_at) FROM lily_messages WHERE queue = ?`, p.Queue).Scan(&next); err != nil {
			return nil, 0, fmt.Errorf("sqlite transport: receive from %s: %w", p.Queue, err)
		}
		if next == nil {
			return nil, 0, nil
		}
		return nil, *next, nil
	}
	if p.IsolateRedeliveries {
		cands = isolate(cands)
	}
	args := make([]any, 0, len(cands)+2)
	// The lease runs from now, not from when the transaction began: it may
	// have waited for the database.
	args = append(args, t.now()+t.opts.VisibilityTimeout.Milliseconds(), p.Consumer)
	for _, c := range cands {
		args = append(args, c.id)
	}
	res, err := tx.QueryContext(ctx, `UPDATE lily_messages
		SET visible_at = ?, receive_count = receive_count + 1, lease_owner = ?
		WHERE id IN (`+qmarks(len(cands))+`)
		RETURNING id, event_id, msg_key, msg_type, body, headers, receive_count, enqueued_at`, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite transport: lease from %s: %w", p.Queue, err)
	}
	ds := make([]*transport.Delivery, 0, len(cands))
	for res.Next() {
		var (
			d        transport.Delivery
			id       int64
			hdr      []byte
			enqueued int64
		)
		if err := res.Scan(&id, &d.EventID, &d.Key, &d.Type, &d.Body, &hdr, &d.DeliveryCount, &enqueued); err != nil {
			res.Close()
			return nil, 0, err
		}
		if len(hdr) > 0 {
			if d.Headers, err = transport.UnmarshalHeaders(hdr); err != nil {
				res.Close()
				return nil, 0, fmt.Errorf("sqlite transport: message %d: %w", id, err)
			}
		}
		d.Queue = p.Queue
		d.EnqueuedAt = time.UnixMilli(enqueued).UTC()
		d.MessageID = strconv.FormatInt(id, 10)
		d.Receipt = receipt{id: id, count: d.DeliveryCount}
		ds = append(ds, &d)
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(); err != nil {
		return nil, 0, fmt.Errorf("sqlite transport: lease commit: %w", err)
	}
	order := make(map[int64]int, len(cands))
	for i, c := range cands {
		order[c.id] = i
	}
	slices.SortFunc(ds, func(a, b *transport.Delivery) int {
		return order[a.Receipt.(receipt).id] - order[b.Receipt.(receipt).id]
	})
	return ds, 0, nil
}

// isolate keeps a redelivered head alone, or the first-time deliveries
// before the first redelivery.
func isolate(cands []candidate) []candidate {
	if cands[0].count > 0 {
		return cands[:1]
	}
	for i, c := range cands {
		if c.count > 0 {
			return cands[:i]
		}
	}
	return cands
}
