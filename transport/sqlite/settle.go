package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// Settle applies all settlements in one transaction (group commit). A
// dead-letter inserts the catalog entry and deletes the message in that
// transaction, so there is no moment where it is in neither or both. A
// settlement whose lease was lost (the message was handed out again) fails
// alone with transport.ErrLeaseLost. The acks go first, a few hundred per
// DELETE statement; the other settlements follow in their order. When a
// batched DELETE removes fewer rows than it names (a lease was lost), the
// transaction is rolled back and the settlements are applied again one
// statement each, which tells the lost ones apart.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	if len(p.Settlements) == 0 {
		return nil
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	err := t.settle(ctx, p, true)
	if errors.Is(err, errAckBatchShort) {
		err = t.settle(ctx, p, false)
	}
	return err
}

// errAckBatchShort reports a batched ack DELETE that removed fewer rows
// than it named; Settle retries one by one.
var errAckBatchShort = errors.New("sqlite transport: a batched ack lost its lease")

// settle is one attempt of Settle: with batchAcks, the acks of messages
// settled once in p are deleted in batches (errAckBatchShort if one of
// them lost its lease); without, every settlement is one statement.
func (t *Transport) settle(ctx context.Context, p *transport.SettleParams, batchAcks bool) error {
	now := t.opts.Now()
	nowMs := now.UnixMilli()
	errs := make([]error, len(p.Settlements))
	failed := 0
	rcs := make([]receipt, len(p.Settlements))
	uses := make(map[int64]int, len(p.Settlements)) // settlements per message
	for i, s := range p.Settlements {
		rc, ok := s.Delivery.Receipt.(receipt)
		if !ok {
			errs[i] = fmt.Errorf("sqlite transport: settle %s: delivery was not received from this transport", s.Delivery.EventID)
			failed++
			continue
		}
		rcs[i] = rc
		uses[rc.id]++
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite transport: settle: %w", err)
	}
	defer tx.Rollback()
	st := &settleStmts{t: t, tx: tx}
	defer st.close()
	acked := map[string]int64{}
	woke := false
	// The acks of messages settled once in this call cannot depend on the
	// order of the others: delete them in batches. A message settled more
	// than once keeps the order (the first settlement wins).
	batched := make([]bool, len(p.Settlements))
	var idx []int
	for i, s := range p.Settlements {
		if batchAcks && errs[i] == nil && s.Action == transport.Ack && uses[rcs[i].id] == 1 {
			batched[i] = true
			idx = append(idx, i)
		}
	}
	if err := st.deleteAcks(ctx, idx, rcs); err != nil {
		if errors.Is(err, errAckBatchShort) {
			return err
		}
		return fmt.Errorf("sqlite transport: settle: %w", err)
	}
	for _, i := range idx {
		d := p.Settlements[i].Delivery
		acked[d.Queue]++
		if d.Key != "" {
			woke = true // the next message of its key may be handed out now (KeyOrder)
		}
	}
	for i, s := range p.Settlements {
		if errs[i] != nil || batched[i] {
			continue // failed above, or a batched ack
		}
		rc := rcs[i]
		var n int64
		var hdr []byte
		if s.Action == transport.Retry || s.Action == transport.DeadLetter {
			// Check the copy's headers before touching the original.
			if hdr, err = transport.MarshalHeaders(s.Headers); err != nil {
				errs[i] = fmt.Errorf("sqlite transport: settle %s: %w: %w", s.Delivery.EventID, errBadHeaders, err)
				failed++
				continue
			}
		}
		switch s.Action {
		case transport.Ack:
			n, err = st.exec(ctx, &st.del, t.st.deleteRow, rc.id, rc.count)
			if err == nil && n == 1 {
				acked[s.Delivery.Queue]++
			}
		case transport.DeadLetter:
			n, err = st.exec(ctx, &st.del, t.st.deleteRow, rc.id, rc.count)
			if err == nil && n == 1 {
				err = st.insertEntry(ctx, catalog.NewEntry(s.Delivery.Queue, s.Delivery.Message, s.Headers, s.Reason, now))
			}
		case transport.Retry:
			n, err = st.exec(ctx, &st.retry, t.st.retryCopy, hdr, nowMs+s.Delay.Milliseconds(), nowMs, rc.id, rc.count)
			if err == nil && n == 1 {
				n, err = st.exec(ctx, &st.del, t.st.deleteRow, rc.id, rc.count)
			}
			woke = true
		case transport.Release:
			n, err = st.exec(ctx, &st.release, t.st.release, nowMs+s.Delay.Milliseconds(), rc.id, rc.count)
			woke = true
		default:
			err = fmt.Errorf("sqlite transport: settle %s: unknown action %d", s.Delivery.EventID, s.Action)
		}
		if err == nil && n != 1 {
			err = fmt.Errorf("sqlite transport: settle %s (%s): %w", s.Delivery.EventID, s.Action, transport.ErrLeaseLost)
		}
		if s.Delivery.Key != "" {
			woke = true // the next message of its key may be handed out now (KeyOrder)
		}
		if err != nil {
			if !isRowError(err) {
				return fmt.Errorf("sqlite transport: settle: %w", err)
			}
			errs[i] = err
			failed++
		}
	}
	for q, n := range acked {
		if err := t.st.ledger.AddTx(ctx, tx, q, 0, n); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite transport: settle commit: %w", err)
	}
	if woke {
		t.signal()
	}
	if failed > 0 {
		return &transport.SettleError{Errs: errs}
	}
	return nil
}

// errBadHeaders marks a copy whose headers cannot be stored.
var errBadHeaders = errors.New("headers cannot be stored")

// isRowError tells a per-settlement failure (nothing changed for that
// delivery) from a database failure that aborts the transaction.
func isRowError(err error) bool {
	return errors.Is(err, transport.ErrLeaseLost)
}

// settleStmts binds the transport's prepared statements to one
// transaction, each on first use.
type settleStmts struct {
	t                   *Transport
	tx                  *sql.Tx
	del, retry, release *sql.Stmt
	ins                 *catalog.Inserter
}

func (s *settleStmts) exec(ctx context.Context, bound **sql.Stmt, prepared *sql.Stmt, args ...any) (int64, error) {
	if *bound == nil {
		*bound = s.tx.StmtContext(ctx, prepared)
	}
	res, err := (*bound).ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// deleteAcks deletes the messages of the settlements idx (acks, one per
// message) fenced by their receipts rcs, ackChunk pairs per statement. It
// returns errAckBatchShort when a statement deleted fewer rows than it
// named: a lease was lost (the statement has no RETURNING clause, which
// would make SQLite keep a statement journal, so it cannot tell which).
func (s *settleStmts) deleteAcks(ctx context.Context, idx []int, rcs []receipt) error {
	args := make([]any, 0, 2*min(len(idx), ackChunk))
	for start := 0; start < len(idx); start += ackChunk {
		chunk := idx[start:min(start+ackChunk, len(idx))]
		st, size := s.t.st.acks.padded(len(chunk))
		args = args[:0]
		for _, i := range chunk {
			args = append(args, rcs[i].id, rcs[i].count)
		}
		for len(args) < 2*size {
			args = append(args, nil, nil) // (NULL, NULL) matches no row
		}
		res, err := s.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n != int64(len(chunk)) {
			return errAckBatchShort
		}
	}
	return nil
}

func (s *settleStmts) insertEntry(ctx context.Context, e *catalog.Entry) error {
	if s.ins == nil {
		in, err := catalog.NewInserter(ctx, s.tx)
		if err != nil {
			return err
		}
		s.ins = in
	}
	return s.ins.Insert(ctx, e)
}

// close releases what the transaction prepared itself (the catalog
// inserter); the bound statements end with the transaction.
func (s *settleStmts) close() {
	if s.ins != nil {
		s.ins.Close()
	}
}
