// Package transport defines what Lily needs from a message broker or store:
// a small Transport interface that a third party can implement, optional
// capability interfaces, and the message and settlement types they share.
//
// The runtime (package lily) makes every decision of docs/design.md §4; a transport
// supplies mechanisms: receive with a broker-side (or persisted before
// handling) delivery count, settle each delivery in the safe order (copy
// confirmed before the original is acknowledged), and publish with
// confirmation.
package transport

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Sentinel errors returned (wrapped) by transports.
var (
	// ErrClosed is returned by a transport after Close.
	ErrClosed = errors.New("transport closed")
	// ErrLeaseLost means a settlement referred to a delivery that the
	// transport no longer holds for this consumer (lease expired and the
	// message was handed out again). Nothing was changed for it.
	ErrLeaseLost = errors.New("delivery lease lost")
	// ErrDeadLetterRefused means the broker refused a dead-letter copy
	// for good: its dead-letter destination is full and rejects publishes,
	// or the copy is larger than the destination takes. Returned only
	// under SettleParams.FailRefused; the original is still held.
	ErrDeadLetterRefused = errors.New("the broker refused the dead-letter copy")
	// ErrUnknownQueue means the target queue does not exist (unroutable).
	ErrUnknownQueue = errors.New("unknown queue")
	// ErrNoCount means the broker cannot count the queue's messages (an
	// InFlightCounter that has no source: Pub/Sub without Cloud
	// Monitoring): what it holds is not known, which is not zero.
	ErrNoCount = errors.New("the broker cannot count the queue's messages")
	// ErrUnsafeQueue means the queue cannot be consumed safely: it lacks
	// what Lily's guarantees rest on (e.g. a RabbitMQ classic queue counts
	// no deliveries, so a crash-type poison message would loop forever).
	// Receive returns it and the consumer stops; the error names the fix.
	ErrUnsafeQueue = errors.New("queue unsafe to consume")
)

// Message is what a publisher hands to a transport: the original body and
// headers, which Lily never alters, plus the identity fields.
type Message struct {
	// EventID is the canonical, publisher-chosen ID of the message; it never
	// changes through retry or redrive.
	EventID string
	// Key orders and partitions messages (Kafka key, park/block key).
	Key string
	// Type names the kind of message, e.g. "order.created".
	Type string
	// Body is the original payload, byte for byte.
	Body []byte
	// Headers are the application headers; see Headers for the value types.
	Headers Headers
	// SchemaVersion is the message's schema version, >= 1; 0 means none.
	// lily.Publish writes it as the x-lily-schema-version header (int32),
	// which is what travels: transports carry headers, not this field, and
	// a delivery's version is read from the header (evidence.SchemaVersion).
	SchemaVersion int
}

// Delivery is one hand-over of a message to a consumer.
type Delivery struct {
	Message
	// Queue is the source queue (or topic) the delivery came from.
	Queue string
	// DeliveryCount is the 1-based number of times the transport handed
	// this copy out, counted by the broker or persisted before handling.
	DeliveryCount int
	// EnqueuedAt is when this copy entered the queue, if known.
	EnqueuedAt time.Time
	// Partition and Offset locate the delivery on a log transport; HasOffset
	// tells whether they are meaningful.
	Partition int32
	Offset    int64
	HasOffset bool
	// MessageID is the transport's own identifier of this copy, for evidence.
	MessageID string
	// ContentID reports that EventID was derived from the message's content
	// because its producer gave it no ID (RabbitMQ's synthetic ID, on the
	// producer's copy and on Lily's copies of it): two byte-identical
	// messages get the same one. IDs from a log's coordinates or a row ID
	// are not content IDs.
	ContentID bool
	// Receipt is the transport's handle for settling this delivery; callers
	// must treat it as opaque.
	Receipt any
}

// Transport is the interface every transport implements. All methods are
// safe for concurrent use.
type Transport interface {
	// Publish durably enqueues messages to a queue and returns only after
	// the transport confirmed all of them. On error, any subset may have
	// been enqueued (at-least-once), never reported as done when not.
	Publish(ctx context.Context, p *PublishParams) error
	// Receive hands out up to p.Max deliveries, waiting up to p.Wait for the
	// first one. It returns an empty slice (and nil error) when none came.
	Receive(ctx context.Context, p *ReceiveParams) ([]*Delivery, error)
	// Settle applies settlements in order of safety: for Retry and
	// DeadLetter the copy is confirmed before the original is removed. It
	// returns nil when all applied; otherwise a *SettleError for the ones
	// that did not (each left unacknowledged), or another error when none
	// applied.
	Settle(ctx context.Context, p *SettleParams) error
	// Close releases the transport's resources.
	Close() error
}

// PublishParams are the arguments of Transport.Publish.
type PublishParams struct {
	// Queue is the destination queue (or topic).
	Queue string
	// Messages are published in order.
	Messages []Message
	// Redrive marks messages that come back from the dead-letter work list
	// (lily dlq redrive): they were accepted once already, so a transport
	// that keeps the ledger does not count them as accepted again.
	Redrive bool
	// Direct asks that the messages reach the queue's own consumer alone:
	// a redrive, a redirect (lily dlq redrive --to) or a release of a
	// parked message is meant for the consumer that failed, or for the
	// redirect's target, not for every reader of a topic. A transport
	// whose queue is one of several readers of a topic (Kafka consumer
	// groups, Pub/Sub subscriptions) sends them through a path only the
	// queue's consumer reads, and refuses when there is none; transports
	// whose queue has no other readers (RabbitMQ's default exchange, SQS,
	// SQLite) publish as usual. Without Redrive, the messages are new to
	// the queue (a redirect): a foreign dead letter's origin is not used.
	Direct bool
}

// ReceiveParams are the arguments of Transport.Receive.
type ReceiveParams struct {
	// Queue to receive from.
	Queue string
	// Max is the most deliveries to return. Values < 1 mean 1.
	Max int
	// Wait is how long to wait for a first delivery; zero returns at once.
	Wait time.Duration
	// Consumer identifies the receiving consumer instance (its leases).
	Consumer string
	// Prefetch is the consumer's window of unsettled deliveries, for
	// transports where the broker pushes (RabbitMQ's basic.qos). Zero
	// means Max.
	Prefetch int
	// IsolateRedeliveries asks the transport to hand a redelivered message
	// (one whose previous delivery was not settled) alone, never in a batch
	// with others, and to stop a batch before the first redelivery. It keeps
	// innocent neighbours out of the blast radius of a crash-type poison.
	IsolateRedeliveries bool
	// KeyOrder asks the transport to hand out a keyed message only when no
	// older message of its key is still in the queue (leased to anyone, or
	// waiting to become visible): per-key order kept at the source, even
	// when a consumer died holding a key's message (ordering "park" and
	// "block"). Transports whose queues are strictly ordered (a RabbitMQ
	// queue with a single active consumer, a Kafka partition) ignore it.
	KeyOrder bool
}

// Action is what a settlement does with a delivery.
type Action int

// The settlement actions.
const (
	// Ack removes the delivery: it was processed.
	Ack Action = iota + 1
	// Retry hands a new copy (with Headers) to the delay bucket for Delay,
	// then removes the original. The copy's delivery count starts again.
	Retry
	// DeadLetter hands a copy with evidence Headers to the dead-letter
	// destination, then removes the original.
	DeadLetter
	// Release gives the delivery back for redelivery (NACK/requeue) without
	// changing it. Delay, when the transport supports it, defers it.
	Release
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead_letter"
	case Release:
		return "release"
	}
	return "unknown"
}

// Settlement is the decision for one delivery.
type Settlement struct {
	Delivery *Delivery
	Action   Action
	// Delay is the bucket delay for Retry (and an optional delay for Release).
	Delay time.Duration
	// Headers are the complete headers of the copy for Retry and DeadLetter:
	// the original headers plus x-retry-count or the evidence.
	Headers Headers
	// Reason is the dead-letter reason (evidence.Reason) for DeadLetter.
	Reason string
}

// SettleParams are the arguments of Transport.Settle.
type SettleParams struct {
	Settlements []Settlement
	// FailRefused asks the transport to fail at once, with an error that
	// wraps ErrDeadLetterRefused, a DeadLetter whose copy the broker
	// refuses (a full dead-letter destination, a copy too large for it),
	// leaving its original held and untouched, instead of holding the
	// original and publishing the copy again: the caller stores the dead
	// letter elsewhere (ledger.Accounted: in the catalog) and then
	// acknowledges the original. Set by that caller; transports that
	// cannot tell a refusal ignore it.
	FailRefused bool
	// OnStored, when set, is called for each DeadLetter (index i into
	// Settlements) that was applied by storing the dead letter in the
	// catalog because the broker refused its copy; why says what the broker
	// refused. Called by ledger.Accounted before Settle returns.
	OnStored func(i int, why string)
}

// SettleError reports settlements that were not applied. Errs is aligned
// with SettleParams.Settlements; a nil element means that one applied.
type SettleError struct {
	Errs []error
}

// Error summarises the failed settlements.
func (e *SettleError) Error() string {
	n := 0
	var first error
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if first == nil {
		return "settle: no failures"
	}
	return "settle: " + strconv.Itoa(n) + " of " + strconv.Itoa(len(e.Errs)) + " not applied; first: " + first.Error()
}

// Err returns the error of settlement i, or nil.
func (e *SettleError) Err(i int) error {
	if i < 0 || i >= len(e.Errs) {
		return nil
	}
	return e.Errs[i]
}

// SettleErrors expands the error returned by Settle into one error per
// settlement (n of them): nil for applied ones.
func SettleErrors(err error, n int) []error {
	out := make([]error, n)
	if err == nil {
		return out
	}
	var se *SettleError
	if errors.As(err, &se) {
		copy(out, se.Errs)
		return out
	}
	for i := range out {
		out[i] = err
	}
	return out
}
