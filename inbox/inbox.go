package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lily-mq/lily"
)

// Inbox applies each message's effect at most once per consumer. Its zero
// value is ready to use; the package-level Once and Apply use it.
type Inbox struct {
	// Consumer names the logical consumer whose effects are deduplicated:
	// two consumers of the same event (two services, two queues bound to
	// one exchange) each apply it once. Defaults to the delivery's queue.
	Consumer string
	// Hooks observe duplicates, beside the hooks of the consumer whose
	// handler calls the inbox (lily.Observe). Defaults to none.
	Hooks []lily.Hook
	// Now returns the time written on a mark (for Prune). Defaults to
	// time.Now.
	Now func() time.Time
}

// Once runs effect at most once per (consumer, event ID), inside tx, the
// handler's own transaction: the mark and the effect's writes commit
// together or not at all. A delivery whose event ID is already marked — a
// broker redelivery after a crash between commit and ack, a duplicate
// publish, a redrive of a message that was applied — skips effect and
// returns nil, so the handler commits and the delivery is acked; the
// duplicate is reported as a lily.EventDuplicate to the consumer's hooks
// (lilyprom counts lily_inbox_duplicates_total{queue}).
//
// effect must write through tx. If it fails, Once takes its mark back and
// returns the error: roll tx back and return the error from the handler
// (the runtime then retries or dead-letters as usual).
//
// On PostgreSQL two transactions that deliver the same event at once do
// not both apply it: the second one's insert waits for the first to end,
// then finds the mark (first committed) or makes it (first rolled back).
func Once(ctx context.Context, tx Tx, d *lily.Delivery, effect func() error) error {
	return Inbox{}.Once(ctx, tx, d, effect)
}

// Apply is Once, and tells whether effect ran (false: a duplicate).
func Apply(ctx context.Context, tx Tx, d *lily.Delivery, effect func() error) (applied bool, err error) {
	return Inbox{}.Apply(ctx, tx, d, effect)
}

// Once is the package-level Once with ib's settings.
func (ib Inbox) Once(ctx context.Context, tx Tx, d *lily.Delivery, effect func() error) error {
	_, err := ib.Apply(ctx, tx, d, effect)
	return err
}

// Apply is the package-level Apply with ib's settings.
func (ib Inbox) Apply(ctx context.Context, tx Tx, d *lily.Delivery, effect func() error) (applied bool, err error) {
	if d == nil {
		return false, errors.New("inbox: nil delivery")
	}
	if d.EventID == "" {
		return false, fmt.Errorf("inbox: delivery from %s has no event ID: the inbox needs one (lily.Publish assigns it; every transport derives one for foreign messages)", d.Queue)
	}
	h, err := open(tx)
	if err != nil {
		return false, fmt.Errorf("inbox: %w", err)
	}
	consumer := ib.Consumer
	if consumer == "" {
		consumer = d.Queue
	}
	now := time.Now
	if ib.Now != nil {
		now = ib.Now
	}
	n, err := h.exec(ctx, `INSERT INTO lily_inbox (consumer, event_id, queue, applied_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (consumer, event_id) DO NOTHING`, consumer, d.EventID, d.Queue, now().UnixMilli())
	if err != nil {
		return false, fmt.Errorf("inbox: mark event %s for consumer %s: %w (did you run inbox.Migrate?)", d.EventID, consumer, err)
	}
	if n == 0 {
		ib.observe(ctx, lily.Event{Kind: lily.EventDuplicate, Queue: d.Queue, EventID: d.EventID})
		return false, nil
	}
	if err := effect(); err != nil {
		// Take the mark back, so that a caller who commits anyway does not
		// record an effect that did not happen. If the transaction is
		// aborted (a failed SQL statement on PostgreSQL), so is the mark.
		_, _ = h.exec(ctx, `DELETE FROM lily_inbox WHERE consumer = $1 AND event_id = $2`, consumer, d.EventID)
		return false, err
	}
	return true, nil
}

// Applied tells whether consumer has applied eventID (a mark exists).
// consumer is the Inbox's Consumer (by default the queue).
func Applied(ctx context.Context, db Tx, consumer, eventID string) (bool, error) {
	h, err := open(db)
	if err != nil {
		return false, fmt.Errorf("inbox: %w", err)
	}
	var one int
	found, err := h.queryRow(ctx, `SELECT 1 FROM lily_inbox WHERE consumer = $1 AND event_id = $2`,
		[]any{consumer, eventID}, &one)
	if err != nil {
		return false, fmt.Errorf("inbox: look up event %s for consumer %s: %w", eventID, consumer, err)
	}
	return found, nil
}

func (ib Inbox) observe(ctx context.Context, e lily.Event) {
	lily.Observe(ctx, e)
	for _, h := range ib.Hooks {
		h.Observe(ctx, e)
	}
}
