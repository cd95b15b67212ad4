package redrive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Keys are the held keys of one catalog store: they keep per-key ordering
// (docs/design.md §4, ordering "park" and "block") across restarts, and implement
// the runtime's lily.KeyStore (lily.ConsumerOptions.Keys). A key is held
// while one of its messages has not been processed in order:
//
//   - held: its head (the message whose failure holds it) was dead-lettered;
//     every later message of the key is diverted, in arrival order, into the
//     catalog as a parked entry.
//   - waiting: exactly one message of the key — the allowed one: a retry
//     copy in its delay bucket, the head sent back by unpark or redrive, or
//     the next parked entry on its way back — may be processed; everything
//     else of the key is still diverted.
//
// When the allowed message succeeds, the consumer advances the key
// (AdvanceKey): the oldest parked entry is sent back to the source queue
// and becomes the allowed one, until none is left and the key is free.
// Messages of a key therefore reach the handler in their arrival order, one
// at a time, with every wait in the broker or the catalog, never in a
// handler. Unpark lets a held key move again. Keys are safe for concurrent
// use.
type Keys struct {
	store *catalog.Store
	db    *catalogdb.DB
	// rd redrives a key's head (Unpark).
	rd *Redriver
	// afterRead, in tests only, runs once Unpark has read the key and
	// before it decides: another decision interleaves there.
	afterRead func()
}

// NewKeys returns the held keys of store.
func NewKeys(store *catalog.Store) *Keys {
	rd := New(store)
	return &Keys{store: store, db: rd.db, rd: rd}
}

// WithTracerProvider returns a view of ks that traces each Unpark with tp
// (a span "unpark <queue>" in the caller's context, linked to the head
// message's trace) and the head's redrive under it, as
// Redriver.TracerProvider does. A nil tp traces nothing.
func (ks *Keys) WithTracerProvider(tp trace.TracerProvider) *Keys {
	c := *ks
	rd := *ks.rd
	rd.TracerProvider = tp
	c.rd = &rd
	return &c
}

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
	// catalog.State is "held" or "waiting" (see the package's held keys).
	State string `json:"state"`
	// HeadEventID is the message whose failure holds the key.
	HeadEventID string `json:"head_event_id"`
	// AllowedEventID is the one message let through while waiting.
	AllowedEventID string `json:"allowed_event_id,omitempty"`
	// Head is the head's latest catalog entry; nil while it has not been
	// ingested from a broker dead-letter queue yet.
	Head *catalog.EntryRef `json:"head,omitempty"`
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
func (ks *Keys) KeyState(ctx context.Context, queue, key string) (state, allowed, head string, err error) {
	err = ks.db.QueryRowContext(ctx, `SELECT state, allowed_event_id, head_event_id FROM lily_held_keys WHERE queue = ? AND msg_key = ?`,
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
func (ks *Keys) HoldKey(ctx context.Context, queue, key, mode, state, eventID string) error {
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
	if _, err := ks.db.ExecContext(ctx, q, queue, key, mode, eventID, now); err != nil {
		return fmt.Errorf("catalog: hold key %q of %s: %w", key, queue, err)
	}
	return nil
}

// AdvanceKey is called when the allowed message of a waiting key was
// processed: it sends the key's oldest parked entry back to queue through
// pub and lets it through, or, with none left, frees the key (free=true).
func (ks *Keys) AdvanceKey(ctx context.Context, queue, key string, pub transport.Transport) (free bool, err error) {
	d := newDecision("", "lily-consumer", keySelector(queue, key), nil)
	free, _, err = ks.advance(ctx, d, queue, key, pub, ActionRelease, keySeen{})
	return free, err
}

// ResumeKeys finishes what a crash or an operator left for the keys of
// queue and returns how many keys are held: an allowed entry recorded but
// still not sent after ResumeGrace is sent (a duplicate at worst), and a
// blocked key whose head was discarded or erased is advanced.
func (ks *Keys) ResumeKeys(ctx context.Context, queue string, pub transport.Transport) (held int, err error) {
	keys, err := ks.HeldKeys(ctx, queue)
	if err != nil {
		return 0, err
	}
	d := newDecision("", "lily-consumer", "", nil)
	for _, k := range keys {
		d.Selector = keySelector(queue, k.Key)
		switch {
		case k.State == KeyWaiting && time.Since(k.UpdatedAt) > ResumeGrace:
			e, err := ks.parkedEntry(ctx, ks.db, queue, k.Key, k.AllowedEventID)
			if err != nil {
				return 0, err
			}
			if e != nil {
				if err := ks.release(ctx, d, e, pub, ActionRelease); err != nil {
					return 0, err
				}
			}
		case k.State == KeyHeld && k.Mode == KeyModeBlock && k.Head != nil && (k.Head.State == catalog.StateDiscarded || k.Head.State == catalog.StateErased):
			free, _, err := ks.advance(ctx, d, queue, k.Key, pub, ActionRelease, keySeen{string(k.State), k.AllowedEventID})
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
func (ks *Keys) HeldKeys(ctx context.Context, queue string) ([]HeldKey, error) {
	return ks.heldKeys(ctx, queue, "")
}

// HeldKey returns key of queue as HeldKeys lists it, or nil when the key
// is free.
func (ks *Keys) HeldKey(ctx context.Context, queue, key string) (*HeldKey, error) {
	if key == "" {
		return nil, nil // a message without a key has no order to hold
	}
	hks, err := ks.heldKeys(ctx, queue, key)
	if err != nil || len(hks) == 0 {
		return nil, err
	}
	return &hks[0], nil
}

// heldKeys reads the held keys of queue (every queue when ""), only key
// when not "", each with its parked count and its head's latest entry, in
// one query.
func (ks *Keys) heldKeys(ctx context.Context, queue, key string) ([]HeldKey, error) {
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
	rows, err := ks.db.QueryContext(ctx, q+` ORDER BY k.queue, k.since, k.msg_key`, args...)
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
			k.Head = &catalog.EntryRef{ID: headID.Int64, Queue: k.Queue, EventID: k.HeadEventID, State: catalog.State(headState.String),
				RedriveCount: int(headRedrives.Int64), DeadLetteredAt: time.UnixMilli(headAt.Int64).UTC()}
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
