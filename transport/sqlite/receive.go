package sqlite

import (
	"context"
	"database/sql"
	"fmt"
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
		ds, err, again := t.waitParked(ctx, p, limit, wake, timer.C)
		timer.Stop()
		if !again {
			return ds, err
		}
	}
}

// leaseResult is what a lease write found.
type leaseResult struct {
	ds   []*transport.Delivery
	next int64
}

// waitParked waits for messages with a lease parked on the next publish
// into the queue (group.go): it runs in that publish's transaction, after
// it, and takes what it published — no wake-up and no transaction of its
// own. It returns again = true when the wait ends without a result (a
// wake from another commit, or tick: the caller looks at the database
// afresh, for other processes' publishes, delays that ended, keys that
// moved on).
//
// A parked lease that ran and found nothing (competing consumers: another
// lease of the group took the messages) parks again at once, with the
// wake channel of after that group's commit: the group signals before it
// answers (runGroup), and the lease looked at the database after every
// commit before it, so no wake is lost and none is answered twice.
func (t *Transport) waitParked(ctx context.Context, p *transport.ReceiveParams, limit int, wake <-chan struct{}, tick <-chan time.Time) (ds []*transport.Delivery, err error, again bool) {
	for {
		w, res := t.leaseWrite(p, limit)
		w.ctx, w.done = ctx, make(chan error, 1)
		if !t.park(w) {
			return nil, fmt.Errorf("sqlite transport: receive: %w", transport.ErrClosed), false
		}
		var stop error // why the wait ends, when nothing was leased
		woken := false
		select {
		case err := <-w.done:
			if err != nil || len(res.ds) > 0 {
				return res.ds, err, false
			}
			if wake, err = t.waiter(); err != nil {
				return nil, fmt.Errorf("sqlite transport: receive: %w", err), false
			}
			continue // another consumer took them: park again
		case <-wake:
			woken = true
		case <-tick:
		case <-ctx.Done():
			stop = ctx.Err()
		case <-t.done:
			stop = fmt.Errorf("sqlite transport: receive: %w", transport.ErrClosed)
		}
		if t.unpark(w) {
			return nil, stop, stop == nil
		}
		// The writer has taken it: what it leased is the caller's.
		if err := <-w.done; err != nil || len(res.ds) > 0 {
			return res.ds, err, false
		}
		if woken { // the wake was its own group's (or one before it): it looked already
			if wake, err = t.waiter(); err != nil {
				return nil, fmt.Errorf("sqlite transport: receive: %w", err), false
			}
			continue
		}
		return nil, stop, stop == nil
	}
}

// candidate is a ready message read by the candidate query: all that
// its delivery needs, so that the lease UPDATE returns nothing.
type candidate struct {
	id       int64
	count    int
	d        *transport.Delivery // EventID, Key, Type, Body; the rest is set once leased
	hdr      []byte
	enqueued int64
}

// lease takes the ready messages; when none is ready it returns the time the
// next one becomes visible (0 if the queue is empty).
func (t *Transport) lease(ctx context.Context, p *transport.ReceiveParams, limit int) ([]*transport.Delivery, int64, error) {
	w, res := t.leaseWrite(p, limit)
	if err := t.write(ctx, w); err != nil { // group.go: committed when it returns nil
		return nil, 0, err
	}
	return res.ds, res.next, nil
}

// leaseWrite returns the write of a lease and where it puts its result.
func (t *Transport) leaseWrite(p *transport.ReceiveParams, limit int) (*write, *leaseResult) {
	res := &leaseResult{}
	w := &write{kind: writeLease, what: "receive", queue: p.Queue, count: limit}
	w.run = func(ctx context.Context, tx *sql.Tx) error {
		var err error
		res.ds, res.next, w.drained, err = t.leaseTx(ctx, tx, p, limit)
		return err
	}
	return w, res
}

// leaseTx is lease's work in tx. The candidate query reads the ready
// rows whole, in order (the receive count is not in the index: it reads
// each row anyway), and the lease UPDATE then only moves them: an UPDATE
// … RETURNING would copy every returned row, body included, into a
// temporary b-tree before handing it out.
//
// drained reports that the lease saw every ready message of the queue
// (fewer than limit, none held back; KeyOrder's view is narrower, so it
// never reports it), for groupWakes.
func (t *Transport) leaseTx(ctx context.Context, tx *sql.Tx, p *transport.ReceiveParams, limit int) (ds []*transport.Delivery, next int64, drained bool, err error) {
	now := t.now()
	rows, err := t.st.candidatesFor(ctx, tx, p.KeyOrder).QueryContext(ctx, p.Queue, now, limit)
	if err != nil {
		return nil, 0, false, fmt.Errorf("sqlite transport: receive from %s: %w", p.Queue, err)
	}
	var cands []candidate
	for rows.Next() {
		c := candidate{d: &transport.Delivery{}}
		if err := rows.Scan(&c.id, &c.count, &c.d.EventID, &c.d.Key, &c.d.Type, &c.d.Body, &c.hdr, &c.enqueued); err != nil {
			rows.Close()
			return nil, 0, false, err
		}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, false, err
	}
	if len(cands) == 0 {
		var next *int64
		if err := tx.StmtContext(ctx, t.st.nextVis).QueryRowContext(ctx, p.Queue).Scan(&next); err != nil {
			return nil, 0, false, fmt.Errorf("sqlite transport: receive from %s: %w", p.Queue, err)
		}
		if next == nil {
			return nil, 0, !p.KeyOrder, nil
		}
		return nil, *next, !p.KeyOrder, nil
	}
	drained = len(cands) < limit && !p.KeyOrder
	if p.IsolateRedeliveries {
		all := len(cands)
		cands = isolate(cands)
		drained = drained && len(cands) == all
	}
	ds = make([]*transport.Delivery, len(cands))
	for i := range cands {
		c := &cands[i]
		d := c.d
		if len(c.hdr) > 0 {
			if d.Headers, err = transport.UnmarshalHeaders(c.hdr); err != nil {
				return nil, 0, false, fmt.Errorf("sqlite transport: message %d: %w", c.id, err)
			}
		}
		d.Queue = p.Queue
		d.DeliveryCount = c.count + 1 // raised by the lease
		d.EnqueuedAt = time.UnixMilli(c.enqueued).UTC()
		d.MessageID = strconv.FormatInt(c.id, 10)
		d.Receipt = receipt{id: c.id, count: d.DeliveryCount}
		ds[i] = d
	}
	// The lease runs from now, not from when the transaction began: it may
	// have waited for the database.
	n, err := t.st.leaseUpdate(ctx, tx, t.now()+t.opts.VisibilityTimeout.Milliseconds(), p.Consumer, cands)
	if err != nil {
		return nil, 0, false, fmt.Errorf("sqlite transport: lease from %s: %w", p.Queue, err)
	}
	if n != int64(len(cands)) { // cannot happen inside the write transaction; never hand out a row not leased
		return nil, 0, false, fmt.Errorf("sqlite transport: lease from %s: leased %d of %d candidates", p.Queue, n, len(cands))
	}
	return ds, 0, drained, nil
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

// candidatesFor binds the candidate query (KeyOrder's or the plain one) to tx.
func (s *statements) candidatesFor(ctx context.Context, tx *sql.Tx, keyOrder bool) *sql.Stmt {
	if keyOrder {
		return tx.StmtContext(ctx, s.candidatesKeyOrder)
	}
	return tx.StmtContext(ctx, s.candidates)
}

// leaseUpdate leases the candidates in tx (visible at visibleAt, owned by
// owner, receive count raised) through the prepared fixed-shape UPDATEs,
// leaseChunk ids per statement, and returns how many rows it leased.
func (s *statements) leaseUpdate(ctx context.Context, tx *sql.Tx, visibleAt int64, owner string, cands []candidate) (int64, error) {
	args := make([]any, 0, 2+min(len(cands), leaseChunk))
	var leased int64
	for start := 0; start < len(cands); start += leaseChunk {
		chunk := cands[start:min(start+leaseChunk, len(cands))]
		st, size := s.lease.padded(len(chunk))
		args = append(args[:0], visibleAt, owner)
		for i := range chunk {
			args = append(args, chunk[i].id)
		}
		for len(args) < 2+size {
			args = append(args, nil) // NULL matches no id
		}
		bound, err := s.bind(ctx, tx, st)
		if err != nil {
			return leased, err
		}
		res, err := bound.ExecContext(ctx, args...)
		if err != nil {
			return leased, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return leased, err
		}
		leased += n
	}
	return leased, nil
}
