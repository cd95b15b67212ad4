package evidence

// Lily's header names (docs/design.md §7). The names are a wire contract: never change them.
const (
	// HeaderEventID is the event ID chosen by the publisher; never changed by retry or
	// redrive. On RabbitMQ it is also the AMQP message_id property.
	HeaderEventID = "x-lily-event-id"
	// HeaderSchemaVersion is the message's schema version.
	HeaderSchemaVersion = "x-lily-schema-version"
	// HeaderRetryCount is the number of framework retries so far: absent means 0;
	// present, it must be an int32 (AMQP long-int) in 0..MaxRetryCount (see RetryCount).
	HeaderRetryCount = "x-retry-count"
	// HeaderRedriveCount is how many times the message was redriven from a DLQ.
	HeaderRedriveCount = "x-lily-redrive-count"
	// HeaderReason is the dead-letter reason, one of the Reason constants.
	HeaderReason = "x-lily-dead-letter-reason"
	// HeaderErrorType is the Go type of the error that dead-lettered the message.
	HeaderErrorType = "x-lily-error-type"
	// HeaderErrorMessage is the error message, redacted, at most MaxErrorMessageBytes.
	HeaderErrorMessage = "x-lily-error-message"
	// HeaderErrorStack is the stack of a recovered panic, at most MaxErrorStackBytes.
	HeaderErrorStack = "x-lily-error-stack"
	// HeaderSource is where the message failed: transport and queue or topic.
	HeaderSource = "x-lily-source"
	// HeaderSourcePartition is the source partition (int32), for partitioned logs.
	HeaderSourcePartition = "x-lily-source-partition"
	// HeaderSourceOffset is the source offset (int64), for logs.
	HeaderSourceOffset = "x-lily-source-offset"
	// HeaderSourceMessageID is the broker's message ID at the source.
	HeaderSourceMessageID = "x-lily-source-message-id"
	// HeaderDeliveryCount is the broker-side delivery count at the time of dead-lettering.
	HeaderDeliveryCount = "x-lily-delivery-count"
	// HeaderFirstFailureAt is the time of the first failure (RFC 3339 UTC, milliseconds).
	HeaderFirstFailureAt = "x-lily-first-failure-at"
	// HeaderLastFailureAt is the time of the last failure (RFC 3339 UTC, milliseconds).
	HeaderLastFailureAt = "x-lily-last-failure-at"
	// HeaderDeadLetteredAt is the time of dead-lettering (RFC 3339 UTC, milliseconds).
	HeaderDeadLetteredAt = "x-lily-dead-lettered-at"
	// HeaderConsumer is the name of the failing consumer.
	HeaderConsumer = "x-lily-consumer"
	// HeaderConsumerVersion is the build version of the failing consumer.
	HeaderConsumerVersion = "x-lily-consumer-version"
	// HeaderHost is the host the failing consumer ran on.
	HeaderHost = "x-lily-host"
	// HeaderTraceparent is the W3C trace context, preserved as received.
	HeaderTraceparent = "traceparent"
	// HeaderRawRetryCount is the raw non-canonical x-retry-count, as text (see FormatRaw),
	// written with reason invalid_retry_count.
	HeaderRawRetryCount = "x-lily-raw-retry-count"
	// HeaderHoldKey is, on a parked copy (reason parked), what it waits behind: the
	// message key, or "partition:N" when ordering "block" holds a whole partition of a
	// log (Kafka).
	HeaderHoldKey = "x-lily-hold-key"
	// HeaderHoldMode is, on a parked copy, the ordering of its queue: "park" or "block".
	// The catalog holds the key again in that mode if the key was freed between the
	// consumer's look at it and the parking (docs/catalog.md, "Held keys").
	HeaderHoldMode = "x-lily-hold-mode"
	// HeaderKey is the message key (ordering and partitioning key).
	HeaderKey = "x-lily-key"
	// HeaderType is the message type.
	HeaderType = "x-lily-type"
	// HeaderPriorDeliveries is carried only by a copy a transport gave back to its
	// queue in place of a redelivery that no handler saw (RabbitMQ, Pub/Sub, SQS, Kafka
	// share groups, with competing consumers): how many times the message had been handed out before
	// (an integer in 1..MaxPriorDeliveries). The copy's delivery count goes on from
	// there, so the give-back neither raises it nor resets it. Retry, dead-letter and
	// redrive copies leave it out.
	HeaderPriorDeliveries = "x-lily-prior-deliveries"
	// HeaderDrill marks a synthetic message of 'lily drill' (its value: the
	// drill's ID). The message's own header, never evidence: it travels with
	// every copy and through a redrive, and a Lily consumer acks a redriven
	// drill message without running its handler (docs/design.md §4.2).
	HeaderDrill = "x-lily-drill"
)

// DrillMark is the HeaderDrill value 'lily drill' gives the message with
// event ID id.
func DrillMark(id string) string { return "drill-" + id }

// IsDrillOf reports whether h marks the drill message with event ID id:
// HeaderDrill is DrillMark(id), so that a mark copied onto another message
// does not make that message a drill.
func IsDrillOf(h map[string]any, id string) bool {
	v, ok := h[HeaderDrill].(string)
	return ok && id != "" && v == DrillMark(id)
}

// MaxPriorDeliveries bounds HeaderPriorDeliveries (delivery_limit is at most 100); a
// larger value, or one that is not an integer, is not Lily's and is ignored.
const MaxPriorDeliveries = 100

// TakePriorDeliveries removes HeaderPriorDeliveries from h and returns
// its count (PriorDeliveries): the hand-outs a give-back copy carries, else
// 0. Transports whose copies arrive as new messages add it to the
// broker's count.
func TakePriorDeliveries(h map[string]any) int {
	v, ok := h[HeaderPriorDeliveries]
	if !ok {
		return 0
	}
	delete(h, HeaderPriorDeliveries)
	return PriorDeliveries(v)
}

// PriorDeliveries reads a HeaderPriorDeliveries value: a signed integer in
// 1..MaxPriorDeliveries, else 0 (absent, another type, out of range: not a
// count Lily wrote, ignored).
func PriorDeliveries(v any) int {
	var n int64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	}
	if n < 1 || n > MaxPriorDeliveries {
		return 0
	}
	return int(n)
}

// CarriedDeliveries is the HeaderPriorDeliveries value of a give-back copy of a
// message handed out count times: count − 1 (the hand-out being given back, which no
// handler saw, is not carried), at most MaxPriorDeliveries, 0 when there is nothing to
// carry.
func CarriedDeliveries(count int) int32 {
	return int32(min(max(count-1, 0), MaxPriorDeliveries))
}

// evidenceHeaders are the headers Record.Apply owns: it writes each of them or, when the
// record's field is empty, removes a stale value.
var evidenceHeaders = []string{
	HeaderReason,
	HeaderErrorType,
	HeaderErrorMessage,
	HeaderErrorStack,
	HeaderSource,
	HeaderSourcePartition,
	HeaderSourceOffset,
	HeaderSourceMessageID,
	HeaderDeliveryCount,
	HeaderFirstFailureAt,
	HeaderLastFailureAt,
	HeaderDeadLetteredAt,
	HeaderConsumer,
	HeaderConsumerVersion,
	HeaderHost,
	HeaderRawRetryCount,
	HeaderHoldKey,
	HeaderHoldMode,
	HeaderDLQRefused,
}

// EvidenceHeaders returns the names of the headers that describe one dead-lettering and
// that Record.Apply owns (it sets or removes each of them). The message's own headers —
// event ID, schema version, key, type, x-retry-count, redrive count, traceparent — are not
// in the list. The result is a new slice on every call.
func EvidenceHeaders() []string {
	return append([]string(nil), evidenceHeaders...)
}

// Reason is why a message was dead-lettered (header x-lily-dead-letter-reason).
type Reason string

// Dead-letter reasons.
const (
	// ReasonPermanent: the handler returned a permanent error (lily.Permanent or a
	// match of the queue's permanent allow-list).
	ReasonPermanent Reason = "permanent"
	// ReasonRetriesExhausted: a transient error after retry_attempts retries.
	ReasonRetriesExhausted Reason = "retries_exhausted"
	// ReasonDeliveryLimit: the broker delivery count went past delivery_limit
	// (crash-type poison); the handler was not called.
	ReasonDeliveryLimit Reason = "delivery_limit"
	// ReasonInvalidRetryCount: x-retry-count was present but not canonical.
	ReasonInvalidRetryCount Reason = "invalid_retry_count"
	// ReasonExpired: the broker dead-lettered the message when its TTL expired.
	ReasonExpired Reason = "expired"
	// ReasonMaxLen: the broker dead-lettered the message because a queue was full.
	ReasonMaxLen Reason = "maxlen"
	// ReasonUnroutable: the message could not be routed to any queue.
	ReasonUnroutable Reason = "unroutable"
	// ReasonParked: the message's key was parked (ordering = "park").
	ReasonParked Reason = "parked"
	// ReasonRejected: the broker dead-lettered the message after a consumer rejected
	// it (RabbitMQ reason "rejected"), outside Lily's control.
	ReasonRejected Reason = "rejected"
)

var reasons = []Reason{
	ReasonPermanent,
	ReasonRetriesExhausted,
	ReasonDeliveryLimit,
	ReasonInvalidRetryCount,
	ReasonExpired,
	ReasonMaxLen,
	ReasonUnroutable,
	ReasonParked,
	ReasonRejected,
}

// Reasons returns every known Reason in a fixed order: permanent, retries_exhausted,
// delivery_limit, invalid_retry_count, expired, maxlen, unroutable, parked, rejected.
// The result is a new slice on every call.
func Reasons() []Reason {
	return append([]Reason(nil), reasons...)
}

// Valid reports whether r is one of the known reasons.
func (r Reason) Valid() bool {
	for _, k := range reasons {
		if r == k {
			return true
		}
	}
	return false
}

// String returns r as text.
func (r Reason) String() string { return string(r) }
