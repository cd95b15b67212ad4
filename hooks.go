package lily

import (
	"context"
	"time"
)

// EventKind names what happened to a delivery.
type EventKind string

// The event kinds a Hook observes.
const (
	// EventAcked: the handler succeeded and the delivery was acknowledged.
	EventAcked EventKind = "acked"
	// EventRetried: a copy went to a delay bucket, then the original was acked.
	EventRetried EventKind = "retried"
	// EventDeadLettered: a copy with evidence went to the dead-letter
	// destination, then the original was acked.
	EventDeadLettered EventKind = "dead_lettered"
	// EventReleased: the delivery was given back for redelivery.
	EventReleased EventKind = "released"
	// EventSettleFailed: a settlement was not confirmed; the original was
	// not acknowledged (an ambiguous settlement, reported, never lost).
	EventSettleFailed EventKind = "settle_failed"
	// EventFault: a runtime fault (panic, handler past its timeout).
	EventFault EventKind = "fault"
	// EventHeld: a transient failure while the circuit breaker was open: a
	// copy waits in a delay bucket without spending a retry.
	EventHeld EventKind = "held"
	// EventBreaker: the circuit breaker changed state (Event.Breaker).
	EventBreaker EventKind = "breaker"
	// EventPaused: an operator paused the queue ('lily queue pause') and
	// the consumer stopped fetching; what it held is finished.
	EventPaused EventKind = "paused"
	// EventResumed: the queue's pause was lifted; the consumer fetches
	// again.
	EventResumed EventKind = "resumed"
	// EventParked: a delivery of a held key was diverted into the catalog
	// as a parked entry, to wait behind the key's head (ordering park or
	// block); its handler was not called.
	EventParked EventKind = "parked"
	// EventKeyHeld: a key was parked or blocked (Event.Key): its head was
	// dead-lettered. An alarm: the key's later messages wait until an
	// operator unparks it (park) or decides its head (block).
	EventKeyHeld EventKind = "key_held"
	// EventKeyReleased: a held key has nothing left waiting and flows again.
	EventKeyReleased EventKind = "key_released"
	// EventAbandoned: the number of handlers abandoned past their timeout
	// and grace that are still running changed (Event.Abandoned): one was
	// abandoned, or an abandoned one returned. Each keeps a handler slot
	// until it returns; export Event.Abandoned as a gauge.
	EventAbandoned EventKind = "abandoned"
	// EventStalled: an alarm — every handler slot is held by an abandoned
	// handler (Event.Abandoned of them), so no handler starts until one
	// returns; the deliveries wait at the source.
	EventStalled EventKind = "stalled"
	// EventDuplicate: the inbox (package inbox) found the delivery's event
	// ID already applied by its consumer — a redelivery or a redrive of an
	// applied message — and skipped the effect; the delivery is acked.
	EventDuplicate EventKind = "duplicate"
	// EventTwin: the inbox (package inbox) found the content ID of a
	// message without an ID of its own (Delivery.ContentID) already applied,
	// on the first delivery of the producer's own copy: another message
	// with the same body, headers and properties — a twin, or the same
	// message published twice — whose effect was applied. The two are one
	// message to the inbox, as to the ledger and the catalog: the effect is
	// not applied again, and the delivery is acked.
	EventTwin EventKind = "twin"
	// EventStale: the version guard (package inbox) found the delivery's
	// entity version not newer than the stored one and skipped the effect;
	// the delivery is acked as a no-op, never dead-lettered (Event.Key is
	// the entity).
	EventStale EventKind = "stale"
	// EventDrillAcked: a message of 'lily drill' (evidence.HeaderDrill)
	// came back redriven and was acked without running the handler: the
	// drill's redrive went through (docs/design.md §4.2). The ledger counts
	// it acked like any other ack.
	EventDrillAcked EventKind = "drill_acked"
)

// Event is one observation of the runtime, for metrics and alerting.
type Event struct {
	Kind    EventKind
	Queue   string
	EventID string
	// Reason is the dead-letter reason for EventDeadLettered.
	Reason string
	// Refused, for EventDeadLettered, is set when the dead letter is stored
	// in the catalog only because the broker refused its dead-letter copy
	// (a full dead-letter queue, a copy too large): it says why. An alarm:
	// an operator must drain or enlarge the dead-letter queue.
	Refused string
	// Delay is the bucket delay for EventRetried.
	Delay time.Duration
	// HandlerDuration is how long the handler ran (zero if not called).
	HandlerDuration time.Duration
	// Err is the handler error or the settlement/fault error.
	Err error
	// Breaker is the new breaker state for EventBreaker.
	Breaker BreakerState
	// Key is the message key for EventKeyHeld and EventKeyReleased.
	Key string
	// Abandoned is how many abandoned handlers are still running, for
	// EventAbandoned and EventStalled.
	Abandoned int
	// RetryCount and DeliveryCount, for EventAcked, are the framework
	// retries the message had taken (x-retry-count) and the broker's
	// delivery count of the acked copy: where successes stop is where the
	// retry limit belongs.
	RetryCount, DeliveryCount int
}

// Hook observes the runtime. Observe is called synchronously from the
// consumer's goroutines and must be fast and safe for concurrent use.
type Hook interface {
	Observe(ctx context.Context, e Event)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f HookFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }
