package redrive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// UnparkParams are the arguments of Unpark.
type UnparkParams struct {
	Queue, Key string
	// DryRun reports what would happen and changes nothing (it is audited).
	DryRun bool
	// MaxRedrives is the queue's max_redrives: a head redriven that many
	// times is not sent again; 0 means every redrive is a manual decision.
	// nil defaults to DefaultMaxRedrives.
	MaxRedrives *int
	// Target returns the transport that publishes into the queue.
	Target func(ctx context.Context, queue string) (Publisher, error)
	// Actor is who decides. Defaults to catalog.DefaultActor().
	Actor string
	// Op is the audit operation ID. Defaults to catalog.NewOp.
	Op string
}

// UnparkResult says what Unpark did (or would do).
type UnparkResult struct {
	Op     string `json:"op"`
	DryRun bool   `json:"dry_run"`
	// Key is the key as it was before the call.
	Key HeldKey `json:"key"`
	// Action is "redrive_head" (the head is sent back and let through; the
	// consumer then releases the parked entries one by one, in order),
	// "release_next" (the head was decided otherwise: the oldest parked
	// entry is sent), "await_head" (the head is already on its way back),
	// or "nothing" (the key was already waiting).
	Action string `json:"action"`
	// Free is set when the key had nothing parked and is free now.
	Free bool `json:"free"`
}

// Unpark lets a held key move again (lily dlq unpark): its head is redriven
// first — x-retry-count reset, redrive count +1, let through alone — and
// once the consumer processed it, the parked entries follow one at a time
// in their original order, each confirmed before the next. If the head
// fails again, it is dead-lettered again and the key stays held.
func (ks *Keys) Unpark(ctx context.Context, p UnparkParams) (UnparkResult, error) {
	d := newDecision(p.Op, p.Actor, keySelector(p.Queue, p.Key), nil)
	d.redriveAs = ActionUnpark
	ctx, sp := ks.traceUnpark(ctx, d, p)
	res, err := ks.unpark(ctx, d, p, sp)
	sp.end(res, err)
	return res, err
}

// unpark is Unpark inside its span.
func (ks *Keys) unpark(ctx context.Context, d decision, p UnparkParams, sp unparkSpan) (UnparkResult, error) {
	res := UnparkResult{Op: d.Op, DryRun: p.DryRun}
	k, err := ks.HeldKey(ctx, p.Queue, p.Key)
	if err != nil {
		return res, err
	}
	if k == nil {
		return res, fmt.Errorf("%w: key %q on queue %q (lily dlq parked lists the held keys)", ErrNotHeld, p.Key, p.Queue)
	}
	res.Key = *k
	ks.linkHead(ctx, sp, k)
	if ks.afterRead != nil {
		ks.afterRead()
	}
	seen := keySeen{k.State, k.AllowedEventID}
	maxR := DefaultMaxRedrives
	if p.MaxRedrives != nil {
		maxR = *p.MaxRedrives
	}
	switch {
	case k.State == KeyWaiting && k.AllowedEventID != k.HeadEventID:
		res.Action = "nothing" // a retry copy or a released entry is on its way
	case k.Head == nil:
		return res, fmt.Errorf("catalog: the head %s of key %q is not in the catalog yet: run lily dlq ingest first", k.HeadEventID, p.Key)
	case k.Head.State == catalog.StatePending && k.Head.RedriveCount >= maxR:
		return res, fmt.Errorf("catalog: the head %s of key %q was redriven %d times (max_redrives %d): decide it by hand (lily dlq discard --id %d --reason ..., then unpark)",
			k.HeadEventID, p.Key, k.Head.RedriveCount, maxR, k.Head.ID)
	case k.Head.State == catalog.StatePending:
		res.Action = "redrive_head"
	case k.Head.State == catalog.StateNeedsManual:
		return res, fmt.Errorf("catalog: the head %s of key %q needs a manual decision (entry %d): discard it with a reason, then unpark", k.HeadEventID, p.Key, k.Head.ID)
	case k.Head.State == catalog.StateRedriven:
		res.Action = "await_head"
	default: // discarded or erased: the rest may follow; or parked, a key held again by a parking (catalogdb.HoldParkedKeys): it goes first
		res.Action = "release_next"
	}
	if p.DryRun || res.Action == "nothing" {
		outcome := OutcomeWould
		if res.Action == "nothing" {
			outcome = OutcomeWaiting
		}
		detail := fmt.Sprintf("%s: %d parked behind head %s", res.Action, k.Parked, k.HeadEventID)
		return res, ks.store.AppendAudit(ctx, d.Record(ActionUnpark, outcome, p.DryRun, []string{k.HeadEventID}, detail))
	}
	if p.Target == nil {
		return res, errors.New("catalog: unpark needs a Target")
	}
	pub, err := p.Target(ctx, p.Queue)
	if err != nil {
		return res, err
	}
	switch res.Action {
	case "await_head":
		moved, err := ks.moveKey(ctx, p.Queue, p.Key, k.HeadEventID, seen, KeyWaiting, k.HeadEventID)
		if err != nil {
			return res, err
		}
		if !moved {
			return ks.movedMeanwhile(ctx, d, res, k.HeadEventID)
		}
		return res, ks.store.AppendAudit(ctx, d.Record(ActionUnpark, OutcomeWaiting, false, []string{k.HeadEventID}, "the head was already redriven; it is let through when it arrives"))
	case "release_next":
		var moved bool
		res.Free, moved, err = ks.advance(ctx, d, p.Queue, p.Key, pub, ActionUnpark, seen)
		if err != nil || !moved {
			return res, err
		}
		return ks.movedMeanwhile(ctx, d, res, k.HeadEventID)
	}
	head, err := ks.store.Get(ctx, k.Head.ID)
	if err != nil {
		return res, err
	}
	moved, err := ks.moveKey(ctx, p.Queue, p.Key, k.HeadEventID, seen, KeyWaiting, k.HeadEventID)
	if err != nil {
		return res, err
	}
	if !moved {
		return ks.movedMeanwhile(ctx, d, res, k.HeadEventID)
	}
	return res, ks.redriveHead(ctx, d, head, pub)
}

// movedMeanwhile records that the key changed between Unpark's read and
// its decision (another unpark, a redrive, or the consumer freed it):
// nothing is done, so that a key is never recreated for a head that has
// already been processed.
func (ks *Keys) movedMeanwhile(ctx context.Context, d decision, res UnparkResult, head string) (UnparkResult, error) {
	res.Action = "nothing"
	return res, ks.store.AppendAudit(ctx, d.Record(ActionUnpark, OutcomeWaiting, false, []string{head}, "the key moved meanwhile (another unpark or its consumer): nothing to do"))
}

// redriveHead redrives the head of a key that moveKey let it through.
func (ks *Keys) redriveHead(ctx context.Context, d decision, head *catalog.Entry, pub Publisher) error {
	_, err := ks.rd.redriveBatch(ctx, d, pub, head.Queue, []*catalog.Entry{head}, nil, Params{})
	if err != nil {
		// Not sent: the key is held again, unless it moved meanwhile (best
		// effort; a stale allowance only lets this head through when it
		// comes).
		_, _ = ks.moveKey(context.WithoutCancel(ctx), head.Queue, head.Key, head.EventID,
			keySeen{KeyWaiting, head.EventID}, KeyHeld, "")
	}
	return err
}

// moveKey moves key, as a decision saw it (seen, with head), to state with
// allowed, in one conditional statement, and says whether it did. A key
// freed, advanced or held for another head since the decision read it is
// left as it is: an upsert here would recreate a freed key waiting for a
// head that was already processed, and park every later message of the key
// behind a message that never comes (docs/design.md §4.9).
func (ks *Keys) moveKey(ctx context.Context, queue, key, head string, seen keySeen, state, allowed string) (bool, error) {
	res, err := ks.db.ExecContext(ctx, `UPDATE lily_held_keys SET state = ?, allowed_event_id = ?, updated_at = ?
		WHERE queue = ? AND msg_key = ? AND state = ? AND allowed_event_id = ? AND head_event_id = ?`,
		state, allowed, time.Now().UnixMilli(), queue, key, seen.state, seen.allowed, head)
	if err != nil {
		return false, fmt.Errorf("catalog: move key %q of %s to %s: %w", key, queue, state, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("catalog: move key %q of %s to %s: %w", key, queue, state, err)
	}
	return n == 1, nil
}

// allowHeads lets through, before they are redriven, the entries of es
// that are the heads of held keys: a redriven head is processed first, and
// the key then moves on. It is one statement per 300 entries, not one per
// entry: on PostgreSQL each is a round trip to the server.
func allowHeads(ctx context.Context, q catalogdb.Querier, es []*catalog.Entry) error {
	const chunk = 300 // 3 parameters each, far below either store's limit
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		n := len(args) / 3
		rows := strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", n), ", ")
		// The subquery locks the keys' rows in (queue, key) order, as a
		// parking does (catalogdb.HoldParkedKeys): never a cycle between them.
		_, err := q.ExecContext(ctx, `UPDATE lily_held_keys SET state = 'waiting', allowed_event_id = head_event_id, updated_at = ?
			WHERE state = 'held' AND (queue, msg_key) IN (SELECT queue, msg_key FROM lily_held_keys
				WHERE state = 'held' AND (queue, msg_key, head_event_id) IN (VALUES `+rows+`) ORDER BY queue, msg_key`+q.Dialect().ForUpdate()+`)`,
			append([]any{time.Now().UnixMilli()}, args...)...)
		if err != nil {
			return fmt.Errorf("catalog: let the heads of held keys through (%d entries from event %v): %w", n, args[2], err)
		}
		args = args[:0]
		return nil
	}
	for _, e := range es {
		if e.Key == "" {
			continue
		}
		args = append(args, e.Queue, e.Key, e.EventID)
		if len(args) == 3*chunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// keySeen is what a decision saw of a held key before it decided: its
// state and allowed event ID. A zero keySeen asks for no check.
type keySeen struct{ state, allowed string }

// advance sends the oldest parked entry of key back and lets it through,
// or frees the key when none is left. It first locks the key's row: two
// advances of one key run one after the other, and advances of other keys
// never wait. With a non-zero seen, a key whose state or allowed event
// changed since the caller read it was advanced by another decision
// meanwhile: nothing is done (moved=false).
func (ks *Keys) advance(ctx context.Context, d decision, queue, key string, pub Publisher, action string, seen keySeen) (free, moved bool, err error) {
	var next *catalog.Entry
	err = ks.db.WithKeyed(ctx, nil, func(tx *catalogdb.Tx) error {
		var now keySeen
		err := tx.QueryRowContext(ctx, `SELECT state, allowed_event_id FROM lily_held_keys WHERE queue = ? AND msg_key = ?`+tx.Dialect().ForUpdate(),
			queue, key).Scan(&now.state, &now.allowed)
		if errors.Is(err, sql.ErrNoRows) {
			moved = true // freed meanwhile
			return nil
		}
		if err != nil {
			return err
		}
		if seen != (keySeen{}) && now != seen {
			moved = true
			return nil
		}
		next, err = ks.parkedEntry(ctx, tx, queue, key, "")
		if err != nil {
			return err
		}
		if next == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM lily_held_keys WHERE queue = ? AND msg_key = ?`, queue, key)
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE lily_held_keys SET state = 'waiting', allowed_event_id = ?, updated_at = ? WHERE queue = ? AND msg_key = ?`,
			next.EventID, time.Now().UnixMilli(), queue, key)
		if err != nil {
			return err
		}
		if tp, ok := pub.(transport.TxPublisher); ok && tp.DB() == ks.db.DB {
			return ks.releaseTx(ctx, tx, d, next, tp, action)
		}
		return nil
	})
	if err != nil {
		return false, false, fmt.Errorf("catalog: advance key %q of %s: %w", key, queue, err)
	}
	if moved || next == nil {
		return next == nil && !moved, moved, nil
	}
	if tp, ok := pub.(transport.TxPublisher); ok && tp.DB() == ks.db.DB {
		return false, false, nil // sent in the transaction above
	}
	return false, false, ks.release(ctx, d, next, pub, action)
}

// parkedEntry returns the oldest parked entry of key (with eventID, when
// not empty), or nil.
func (ks *Keys) parkedEntry(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, queue, key, eventID string) (*catalog.Entry, error) {
	query := `SELECT ` + catalogdb.SelectCols + ` FROM lily_dlq_entries WHERE queue = ? AND hold_key = ? AND state = 'parked'`
	args := []any{queue, key}
	if eventID != "" {
		query += ` AND event_id = ?`
		args = append(args, eventID)
	}
	e, err := catalogdb.ScanEntry(q.QueryRowContext(ctx, query+` ORDER BY id LIMIT 1`, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: parked entry of key %q: %w", key, err)
	}
	return e, nil
}

// release publishes a parked entry back to its queue and, once confirmed,
// marks it redriven with its audit record.
func (ks *Keys) release(ctx context.Context, d decision, e *catalog.Entry, pub Publisher, action string) error {
	if tp, ok := pub.(transport.TxPublisher); ok && tp.DB() == ks.db.DB {
		return ks.db.WithKeyed(ctx, nil, func(tx *catalogdb.Tx) error { return ks.releaseTx(ctx, tx, d, e, tp, action) })
	}
	if err := pub.Publish(ctx, releaseParams(e)); err != nil {
		return fmt.Errorf("catalog: release %s to %s: %w", e.EventID, e.Queue, err)
	}
	return ks.db.WithKeyed(context.WithoutCancel(ctx), nil, func(tx *catalogdb.Tx) error { return markReleased(ctx, tx, d, e, action) })
}

// releaseTx is release inside tx, publishing through the catalog's own
// database.
func (ks *Keys) releaseTx(ctx context.Context, tx *catalogdb.Tx, d decision, e *catalog.Entry, tp transport.TxPublisher, action string) error {
	if err := markReleased(ctx, tx, d, e, action); err != nil {
		return err
	}
	if err := tp.PublishTx(ctx, tx.Tx, releaseParams(e)); err != nil {
		return fmt.Errorf("catalog: release %s to %s: %w", e.EventID, e.Queue, err)
	}
	return nil
}

func releaseParams(e *catalog.Entry) *transport.PublishParams {
	return &transport.PublishParams{Queue: e.Queue, Redrive: true, Direct: true, Messages: []transport.Message{{
		EventID: e.EventID, Key: e.Key, Type: e.Type, Body: e.Body, Headers: evidence.ReleaseHeaders(e.Headers)}}}
}

// markReleased marks a parked entry redriven (released, not failed again:
// its redrive count stays) with its audit record.
func markReleased(ctx context.Context, tx *catalogdb.Tx, d decision, e *catalog.Entry, action string) error {
	now := d.Now().UnixMilli()
	why := "released in order behind key " + e.Key
	if _, err := tx.ExecContext(ctx, `UPDATE lily_dlq_entries SET state = 'redriven', decided_at = ?1, decided_by = ?2, decision = ?3, updated_at = ?1
		WHERE id = ?4 AND state = 'parked'`, now, d.Actor, why, e.ID); err != nil {
		return fmt.Errorf("catalog: mark %s released: %w", e.EventID, err)
	}
	return catalogdb.AppendAudit(ctx, tx, d.Record(action, OutcomeReleased, false, []string{e.EventID}, why))
}

func keySelector(queue, key string) string {
	return fmt.Sprintf(`{"queue":%q,"key":%q}`, queue, key)
}
