package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Key modes (the queue's ordering) and key states.
const (
	KeyModePark  = "park"
	KeyModeBlock = "block"
	KeyHeld      = "held"
	KeyWaiting   = "waiting"
)

// Audit actions and outcomes of held keys.
const (
	ActionUnpark    = "unpark"
	ActionRelease   = "release"
	OutcomeReleased = "released"
	OutcomeWaiting  = "waiting"
	OutcomeWould    = "would_unpark"
)

// ErrNotHeld is returned for a key that is neither parked nor blocked.
var ErrNotHeld = errors.New("catalog: the key is not parked or blocked")

// HeldKey is one parked or blocked key, as lily dlq parked lists it.
type HeldKey struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	// Mode is the queue's ordering: "park" or "block".
	Mode string `json:"mode"`
	// State is "held" or "waiting" (see the package's held keys).
	State string `json:"state"`
	// HeadEventID is the message whose failure holds the key.
	HeadEventID string `json:"head_event_id"`
	// AllowedEventID is the one message let through while waiting.
	AllowedEventID string `json:"allowed_event_id,omitempty"`
	// Head is the head's latest catalog entry; nil while it has not been
	// ingested from a broker dead-letter queue yet.
	Head *EntryRef `json:"head,omitempty"`
	// Parked is the number of later messages waiting in the catalog.
	Parked int64     `json:"parked"`
	Since  time.Time `json:"since"`
	// UpdatedAt is when the key last changed state.
	UpdatedAt time.Time `json:"updated_at"`
}

// ResumeGrace is how long an allowed parked entry may stay unsent before
// ResumeKeys sends it: a consumer sends it within moments of allowing it,
// so one older than this was left by a crash.
const ResumeGrace = 5 * time.Second

// KeyState returns the state of key on queue ("" when it is free), the
// allowed event ID (when waiting) and the head's event ID.
func (s *Store) KeyState(ctx context.Context, queue, key string) (state, allowed, head string, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT state, allowed_event_id, head_event_id FROM lily_held_keys WHERE queue = ? AND msg_key = ?`,
		queue, key).Scan(&state, &allowed, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", "", nil
	}
	if err != nil {
		return "", "", "", fmt.Errorf("catalog: key %q of %s: %w", key, queue, err)
	}
	return state, allowed, head, nil
}

// HoldKey holds key on queue with the given mode. With state KeyHeld,
// eventID is the dead-lettered head and nothing of the key passes; with
// KeyWaiting, eventID is the one message allowed through (a retry copy, a
// released delivery). The change is committed before HoldKey returns.
func (s *Store) HoldKey(ctx context.Context, queue, key, mode, state, eventID string) error {
	now := time.Now().UnixMilli()
	var q string
	switch state {
	case KeyHeld:
		q = `INSERT INTO lily_held_keys(queue, msg_key, mode, state, head_event_id, allowed_event_id, since, updated_at)
			VALUES (?1, ?2, ?3, 'held', ?4, '', ?5, ?5)
			ON CONFLICT(queue, msg_key) DO UPDATE SET mode = ?3, state = 'held', head_event_id = ?4, allowed_event_id = '', updated_at = ?5`
	case KeyWaiting:
		q = `INSERT INTO lily_held_keys(queue, msg_key, mode, state, head_event_id, allowed_event_id, since, updated_at)
			VALUES (?1, ?2, ?3, 'waiting', ?4, ?4, ?5, ?5)
			ON CONFLICT(queue, msg_key) DO UPDATE SET mode = ?3, state = 'waiting', allowed_event_id = ?4, updated_at = ?5`
	default:
		return fmt.Errorf("catalog: hold key %q: state %q must be %q or %q", key, state, KeyHeld, KeyWaiting)
	}
	if _, err := s.db.ExecContext(ctx, q, queue, key, mode, eventID, now); err != nil {
		return fmt.Errorf("catalog: hold key %q of %s: %w", key, queue, err)
	}
	return nil
}

// AdvanceKey is called when the allowed message of a waiting key was
// processed: it sends the key's oldest parked entry back to queue through
// pub and lets it through, or, with none left, frees the key (free=true).
func (s *Store) AdvanceKey(ctx context.Context, queue, key string, pub transport.Transport) (free bool, err error) {
	d := catalogdb.NewDecision("", "lily-consumer", keySelector(queue, key), nil)
	return s.advance(ctx, d, queue, key, pub, ActionRelease)
}

// ResumeKeys finishes what a crash or an operator left for the keys of
// queue and returns how many keys are held: an allowed entry recorded but
// still not sent after ResumeGrace is sent (a duplicate at worst), and a
// blocked key whose head was discarded or erased is advanced.
func (s *Store) ResumeKeys(ctx context.Context, queue string, pub transport.Transport) (held int, err error) {
	keys, err := s.HeldKeys(ctx, queue)
	if err != nil {
		return 0, err
	}
	d := catalogdb.NewDecision("", "lily-consumer", "", nil)
	for _, k := range keys {
		d.Selector = keySelector(queue, k.Key)
		switch {
		case k.State == KeyWaiting && time.Since(k.UpdatedAt) > ResumeGrace:
			e, err := s.parkedEntry(ctx, s.db, queue, k.Key, k.AllowedEventID)
			if err != nil {
				return 0, err
			}
			if e != nil {
				if err := s.release(ctx, d, e, pub, ActionRelease); err != nil {
					return 0, err
				}
			}
		case k.State == KeyHeld && k.Mode == KeyModeBlock && k.Head != nil && (k.Head.State == StateDiscarded || k.Head.State == StateErased):
			free, err := s.advance(ctx, d, queue, k.Key, pub, ActionRelease)
			if err != nil {
				return 0, err
			}
			if free {
				continue
			}
		}
		held++
	}
	return held, nil
}

// HeldKeys lists the held keys of queue ("" for every queue) with their
// head and the number of parked entries behind it.
func (s *Store) HeldKeys(ctx context.Context, queue string) ([]HeldKey, error) {
	return s.heldKeys(ctx, queue, "")
}

// HeldKey returns key of queue as HeldKeys lists it, or nil when the key
// is free.
func (s *Store) HeldKey(ctx context.Context, queue, key string) (*HeldKey, error) {
	if key == "" {
		return nil, nil // a message without a key has no order to hold
	}
	ks, err := s.heldKeys(ctx, queue, key)
	if err != nil || len(ks) == 0 {
		return nil, err
	}
	return &ks[0], nil
}

// heldKeys reads the held keys of queue (every queue when ""), only key
// when not "", each with its parked count and its head's latest entry, in
// one query.
func (s *Store) heldKeys(ctx context.Context, queue, key string) ([]HeldKey, error) {
	q := `SELECT k.queue, k.msg_key, k.mode, k.state, k.head_event_id, k.allowed_event_id, k.since, k.updated_at,
		(SELECT COUNT(*) FROM lily_dlq_entries e WHERE e.queue = k.queue AND e.hold_key = k.msg_key AND e.state = 'parked'),
		h.id, h.state, h.redrive_count, h.dead_lettered_at
		FROM lily_held_keys k
		LEFT JOIN lily_dlq_entries h ON h.id = (SELECT MAX(e.id) FROM lily_dlq_entries e WHERE e.queue = k.queue AND e.event_id = k.head_event_id)`
	var conds []string
	var args []any
	if queue != "" {
		conds = append(conds, `k.queue = ?`)
		args = append(args, queue)
	}
	if key != "" {
		conds = append(conds, `k.msg_key = ?`)
		args = append(args, key)
	}
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, " AND ")
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY k.queue, k.since, k.msg_key`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: held keys: %w", err)
	}
	defer rows.Close()
	var out []HeldKey
	for rows.Next() {
		var k HeldKey
		var since, updated int64
		var headID, headRedrives, headAt sql.NullInt64
		var headState sql.NullString
		if err := rows.Scan(&k.Queue, &k.Key, &k.Mode, &k.State, &k.HeadEventID, &k.AllowedEventID, &since, &updated, &k.Parked,
			&headID, &headState, &headRedrives, &headAt); err != nil {
			return nil, fmt.Errorf("catalog: held keys: %w", err)
		}
		k.Since = time.UnixMilli(since).UTC()
		k.UpdatedAt = time.UnixMilli(updated).UTC()
		if headID.Valid { // the head's latest dead-lettering; absent while not ingested
			k.Head = &EntryRef{ID: headID.Int64, Queue: k.Queue, EventID: k.HeadEventID, State: State(headState.String),
				RedriveCount: int(headRedrives.Int64), DeadLetteredAt: time.UnixMilli(headAt.Int64).UTC()}
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

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
	// Actor is who decides. Defaults to DefaultActor().
	Actor string
	// Op is the audit operation ID. Defaults to NewOp.
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
func (s *Store) Unpark(ctx context.Context, p UnparkParams) (UnparkResult, error) {
	d := catalogdb.NewDecision(p.Op, p.Actor, keySelector(p.Queue, p.Key), nil)
	d.RedriveAs = ActionUnpark
	res := UnparkResult{Op: d.Op, DryRun: p.DryRun}
	k, err := s.HeldKey(ctx, p.Queue, p.Key)
	if err != nil {
		return res, err
	}
	if k == nil {
		return res, fmt.Errorf("%w: key %q on queue %q (lily dlq parked lists the held keys)", ErrNotHeld, p.Key, p.Queue)
	}
	res.Key = *k
	maxR := DefaultMaxRedrives
	if p.MaxRedrives != nil {
		maxR = *p.MaxRedrives
	}
	switch {
	case k.State == KeyWaiting && k.AllowedEventID != k.HeadEventID:
		res.Action = "nothing" // a retry copy or a released entry is on its way
	case k.Head == nil:
		return res, fmt.Errorf("catalog: the head %s of key %q is not in the catalog yet: run lily dlq ingest first", k.HeadEventID, p.Key)
	case k.Head.State == StatePending && k.Head.RedriveCount >= maxR:
		return res, fmt.Errorf("catalog: the head %s of key %q was redriven %d times (max_redrives %d): decide it by hand (lily dlq discard --id %d --reason ..., then unpark)",
			k.HeadEventID, p.Key, k.Head.RedriveCount, maxR, k.Head.ID)
	case k.Head.State == StatePending:
		res.Action = "redrive_head"
	case k.Head.State == StateNeedsManual:
		return res, fmt.Errorf("catalog: the head %s of key %q needs a manual decision (entry %d): discard it with a reason, then unpark", k.HeadEventID, p.Key, k.Head.ID)
	case k.Head.State == StateRedriven:
		res.Action = "await_head"
	default: // discarded or erased: the rest may follow
		res.Action = "release_next"
	}
	if p.DryRun || res.Action == "nothing" {
		outcome := OutcomeWould
		if res.Action == "nothing" {
			outcome = OutcomeWaiting
		}
		detail := fmt.Sprintf("%s: %d parked behind head %s", res.Action, k.Parked, k.HeadEventID)
		return res, s.AppendAudit(ctx, d.Record(ActionUnpark, outcome, p.DryRun, []string{k.HeadEventID}, detail))
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
		if err := s.HoldKey(ctx, p.Queue, p.Key, k.Mode, KeyWaiting, k.HeadEventID); err != nil {
			return res, err
		}
		return res, s.AppendAudit(ctx, d.Record(ActionUnpark, OutcomeWaiting, false, []string{k.HeadEventID}, "the head was already redriven; it is let through when it arrives"))
	case "release_next":
		res.Free, err = s.advance(ctx, d, p.Queue, p.Key, pub, ActionUnpark)
		return res, err
	}
	head, err := s.Get(ctx, k.Head.ID)
	if err != nil {
		return res, err
	}
	return res, s.redriveHead(ctx, d, head, k.Mode, pub)
}

// redriveHead lets the head of a held key through and redrives it.
func (s *Store) redriveHead(ctx context.Context, d catalogdb.Decision, head *Entry, mode string, pub Publisher) error {
	if err := s.HoldKey(ctx, head.Queue, head.Key, mode, KeyWaiting, head.EventID); err != nil {
		return err
	}
	_, err := s.redriveBatch(ctx, d, pub, head.Queue, []*Entry{head}, nil, RedriveParams{})
	if err != nil {
		// Not sent: the key is held again (best effort; a stale allowance
		// only lets this head through when it comes).
		_ = s.HoldKey(context.WithoutCancel(ctx), head.Queue, head.Key, mode, KeyHeld, head.EventID)
	}
	return err
}

// allowHeads lets through, before they are redriven, the entries of es
// that are the heads of held keys: a redriven head is processed first, and
// the key then moves on. It is one statement per 300 entries, not one per
// entry: on PostgreSQL each is a round trip to the server.
func (s *Store) allowHeads(ctx context.Context, q catalogdb.Querier, es []*Entry) error {
	const chunk = 300 // 3 parameters each, far below either store's limit
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		n := len(args) / 3
		rows := strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", n), ", ")
		_, err := q.ExecContext(ctx, `UPDATE lily_held_keys SET state = 'waiting', allowed_event_id = head_event_id, updated_at = ?
			WHERE state = 'held' AND (queue, msg_key, head_event_id) IN (VALUES `+rows+`)`,
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

// advance sends the oldest parked entry of key back and lets it through,
// or frees the key when none is left.
func (s *Store) advance(ctx context.Context, d catalogdb.Decision, queue, key string, pub Publisher, action string) (free bool, err error) {
	var next *Entry
	err = s.db.WithTx(ctx, func(tx *catalogdb.Tx) error {
		var err error
		next, err = s.parkedEntry(ctx, tx, queue, key, "")
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
		if tp, ok := pub.(transport.TxPublisher); ok && tp.DB() == s.db.DB {
			return s.releaseTx(ctx, tx, d, next, tp, action)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("catalog: advance key %q of %s: %w", key, queue, err)
	}
	if next == nil {
		return true, nil
	}
	if tp, ok := pub.(transport.TxPublisher); ok && tp.DB() == s.db.DB {
		return false, nil // sent in the transaction above
	}
	return false, s.release(ctx, d, next, pub, action)
}

// parkedEntry returns the oldest parked entry of key (with eventID, when
// not empty), or nil.
func (s *Store) parkedEntry(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, queue, key, eventID string) (*Entry, error) {
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
func (s *Store) release(ctx context.Context, d catalogdb.Decision, e *Entry, pub Publisher, action string) error {
	if tp, ok := pub.(transport.TxPublisher); ok && tp.DB() == s.db.DB {
		return s.db.WithTx(ctx, func(tx *catalogdb.Tx) error { return s.releaseTx(ctx, tx, d, e, tp, action) })
	}
	if err := pub.Publish(ctx, releaseParams(e)); err != nil {
		return fmt.Errorf("catalog: release %s to %s: %w", e.EventID, e.Queue, err)
	}
	return s.db.WithTx(context.WithoutCancel(ctx), func(tx *catalogdb.Tx) error { return markReleased(ctx, tx, d, e, action) })
}

// releaseTx is release inside tx, publishing through the catalog's own
// database.
func (s *Store) releaseTx(ctx context.Context, tx *catalogdb.Tx, d catalogdb.Decision, e *Entry, tp transport.TxPublisher, action string) error {
	if err := markReleased(ctx, tx, d, e, action); err != nil {
		return err
	}
	if err := tp.PublishTx(ctx, tx.Tx, releaseParams(e)); err != nil {
		return fmt.Errorf("catalog: release %s to %s: %w", e.EventID, e.Queue, err)
	}
	return nil
}

func releaseParams(e *Entry) *transport.PublishParams {
	return &transport.PublishParams{Queue: e.Queue, Redrive: true, Messages: []transport.Message{{
		EventID: e.EventID, Key: e.Key, Type: e.Type, Body: e.Body, Headers: evidence.ReleaseHeaders(e.Headers)}}}
}

// markReleased marks a parked entry redriven (released, not failed again:
// its redrive count stays) with its audit record.
func markReleased(ctx context.Context, tx *catalogdb.Tx, d catalogdb.Decision, e *Entry, action string) error {
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
