package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Settle applies all settlements in one transaction (group commit, shared
// with concurrent writes: group.go). A
// dead-letter inserts the catalog entry and deletes the message in that
// transaction, so there is no moment where it is in neither or both. A
// settlement whose lease was lost (the message was handed out again) fails
// alone with transport.ErrLeaseLost.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	if len(p.Settlements) == 0 {
		return nil
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	return t.writeSettlements(ctx, "settle", len(p.Settlements), func(ctx context.Context, tx *sql.Tx, errs []error) (int, bool, error) {
		return t.settleTx(ctx, tx, p, errs)
	})
}

// writeSettlements runs run, the work of n settlements (Settle,
// ExtendLeases, Unreceive), as one write of a group transaction (group.go)
// and returns once it is committed. run fills errs with the failures of
// single settlements and returns how many there are and whether the
// commit makes messages ready; it may run twice (alone, after a failed
// group), so errs is cleared before each run. Single failures come back as
// a *transport.SettleError; a failure of the transaction as itself.
func (t *Transport) writeSettlements(ctx context.Context, what string, n int, run func(ctx context.Context, tx *sql.Tx, errs []error) (failed int, wakes bool, err error)) error {
	errs := make([]error, n)
	failed := 0
	w := &write{kind: writeSettle, what: what}
	w.run = func(ctx context.Context, tx *sql.Tx) error {
		clear(errs)
		var err error
		failed, w.wakes, err = run(ctx, tx, errs)
		return err
	}
	if err := t.write(ctx, w); err != nil { // committed when it returns nil
		return err
	}
	if failed > 0 {
		return &transport.SettleError{Errs: errs}
	}
	return nil
}

// settleTx is Settle's work in tx: it fills errs with the per-settlement
// failures and returns how many there are and whether the commit makes
// messages ready (a retry, a release, a keyed message's successor).
func (t *Transport) settleTx(ctx context.Context, tx *sql.Tx, p *transport.SettleParams, errs []error) (failed int, woke bool, err error) {
	now := t.opts.Now()
	nowMs := now.UnixMilli()
	st := &settleStmts{tx: tx}
	defer st.close()
	acked := map[string]int64{}
	var parked []*catalogdb.Entry
	for i, s := range p.Settlements {
		rc, ok := s.Delivery.Receipt.(receipt)
		if !ok {
			errs[i] = fmt.Errorf("sqlite transport: settle %s: delivery was not received from this transport", s.Delivery.EventID)
			failed++
			continue
		}
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
				e := catalogdb.NewEntry(s.Delivery.Queue, s.Delivery.Message, s.Headers, s.Reason, now)
				if err = st.insertEntry(ctx, e); err == nil && e.State == catalogdb.StateParked {
					parked = append(parked, e)
				}
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
				return 0, false, fmt.Errorf("sqlite transport: settle: %w", err)
			}
			errs[i] = err
			failed++
		}
	}
	// A parked entry's key may have been freed since the consumer looked
	// at it: held again, the entry is never left without its key
	// (catalogdb.HoldParkedKeys; this transaction is the one writer).
	if err := catalogdb.HoldParkedKeys(ctx, catalogdb.SQLiteTx(tx), parked, now); err != nil {
		return 0, false, fmt.Errorf("sqlite transport: settle: %w", err)
	}
	for q, n := range acked {
		if err := t.st.ledger.AddTx(ctx, tx, q, 0, n); err != nil {
			return 0, false, err
		}
	}
	return failed, woke, nil
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
	tx                  *sql.Tx
	del, retry, release *sql.Stmt
	ins                 *catalogdb.Inserter
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

func (s *settleStmts) insertEntry(ctx context.Context, e *catalogdb.Entry) error {
	if s.ins == nil {
		in, err := catalogdb.NewInserter(ctx, s.tx)
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
