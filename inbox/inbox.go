package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
)

// ContentIDPolicy says what the inbox does with a delivery whose event ID
// is a content ID (lily.Delivery.ContentID): an ID RabbitMQ's transport
// derived from the body, headers and properties of a message whose
// producer set none. Byte-identical messages ("twins") share such an ID,
// and nothing the broker gives tells them apart (docs/identity.md), so
// the inbox cannot know whether a second one is a twin or the same
// message again.
type ContentIDPolicy int

const (
	// ContentIDsOnce keys the effect by the content ID like any event ID:
	// twins are one message and get one effect, as the ledger and the
	// catalog count them. It is never silent where the inbox can see a
	// twin: the first delivery of the producer's own copy (not a
	// redelivery, not a retry or redrive copy) that finds the ID applied
	// is another message with the same content — a twin, or the same
	// message published twice — and is logged as a warning, reported as
	// lily.EventTwin (lilyprom: lily_inbox_twins_total) and acked without
	// the effect. A twin that was in flight when its consumer died and
	// comes back redelivered looks like a redelivery and is counted as a
	// duplicate (docs/inbox.md, "Messages without an ID").
	ContentIDsOnce ContentIDPolicy = iota
	// ContentIDsRefuse applies no effect under a content ID: Apply returns
	// a permanent error wrapping ErrContentID, so the runtime dead-letters
	// the message with that evidence at once. For effects that must never
	// be merged, on queues whose producers must set a message_id.
	ContentIDsRefuse
)

// ErrContentID is returned (wrapped, as a lily.Permanent error) by an
// Inbox with ContentIDsRefuse for a delivery whose event ID is a content
// ID.
var ErrContentID = errors.New("the event ID was derived from the message's content (its producer set no message_id), so byte-identical messages would share one effect")

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
	// ContentIDs says what to do with deliveries whose event ID was derived
	// from their content (see ContentIDPolicy). Defaults to ContentIDsOnce.
	ContentIDs ContentIDPolicy
	// Logger receives a warning for every twin found (ContentIDsOnce).
	// Defaults to slog.Default().
	Logger *slog.Logger
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
//
// A message whose producer set no ID has a content ID on RabbitMQ
// (lily.Delivery.ContentID), shared by byte-identical messages: Once
// applies one effect for such twins and reports each twin it finds
// (lily.EventTwin and a warning); Inbox.ContentIDs can refuse such IDs.
func Once(ctx context.Context, tx Tx, d *lily.Delivery, effect func() error) error {
	return Inbox{}.Once(ctx, tx, d, effect)
}

// Apply is Once, and tells whether effect ran (false: a duplicate, or a
// twin of a message without an ID).
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
	if d.ContentID && ib.ContentIDs == ContentIDsRefuse {
		return false, lily.Permanent(fmt.Errorf("inbox: delivery %s from %s: %w; set a message_id on the producer", d.EventID, d.Queue, ErrContentID))
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
		if d.ContentID && producersCopy(d) {
			ib.twin(ctx, consumer, d)
			return false, nil
		}
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

// producersCopy reports whether d is the first hand-over of the copy its
// producer published: not a redelivery (the broker handed it out before),
// not one of Lily's copies (a retry, a hold, a redrive, a give-back), which
// carry the event ID as x-lily-event-id. Such a delivery was never handled
// before, so a mark for its content ID was made by another message.
func producersCopy(d *lily.Delivery) bool {
	_, lilys := d.Headers[evidence.HeaderEventID]
	return d.DeliveryCount == 1 && !lilys
}

// twin reports a twin: d's content ID is applied, by another message.
func (ib Inbox) twin(ctx context.Context, consumer string, d *lily.Delivery) {
	log := ib.Logger
	if log == nil {
		log = slog.Default()
	}
	log.WarnContext(ctx, "inbox: a message without an ID is byte-identical to one already applied (a twin, or the same message published twice): "+
		"its effect is not applied again; set a message_id on the producer if its twins are distinct messages",
		"queue", d.Queue, "consumer", consumer, "event_id", d.EventID)
	ib.observe(ctx, lily.Event{Kind: lily.EventTwin, Queue: d.Queue, EventID: d.EventID})
}

func (ib Inbox) observe(ctx context.Context, e lily.Event) {
	lily.Observe(ctx, e)
	for _, h := range ib.Hooks {
		h.Observe(ctx, e)
	}
}
