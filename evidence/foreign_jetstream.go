package evidence

import (
	"strconv"
	"strings"
	"time"
)

// SystemJetStream: a NATS JetStream consumer's advisory that a message
// reached MaxDeliver or was terminated, which Lily's ingest of a foreign
// JetStream consumer ([[foreign_dlq]] kind = "jetstream") writes beside the
// message's own headers (HeaderJetStream*).
const SystemJetStream = "jetstream"

// The headers of a JetStream consumer's dead letter, written by the ingest
// from the server's advisory (docs/design.md §8.8).
const (
	// HeaderJetStreamPrefix starts every HeaderJetStream* name; a redrive
	// leaves them out.
	HeaderJetStreamPrefix = "x-lily-jetstream-"
	// HeaderJetStreamAdvisory is JetStreamMaxDeliveries or
	// JetStreamTerminated.
	HeaderJetStreamAdvisory = "x-lily-jetstream-advisory"
	// HeaderJetStreamStream and HeaderJetStreamConsumer name the stream
	// and consumer.
	HeaderJetStreamStream   = "x-lily-jetstream-stream"
	HeaderJetStreamConsumer = "x-lily-jetstream-consumer"
	// HeaderJetStreamSequence is the message's stream sequence.
	HeaderJetStreamSequence = "x-lily-jetstream-stream-seq"
	// HeaderJetStreamDeliveries is the server's delivery count.
	HeaderJetStreamDeliveries = "x-lily-jetstream-deliveries"
	// HeaderJetStreamTime is the advisory's time (RFC 3339).
	HeaderJetStreamTime = "x-lily-jetstream-time"
	// HeaderJetStreamTermReason is a terminated message's reason (servers
	// 2.10.4 and later send one).
	HeaderJetStreamTermReason = "x-lily-jetstream-term-reason"
	// HeaderJetStreamSubject is the subject the message was stored under.
	HeaderJetStreamSubject = "x-lily-jetstream-subject"
	// HeaderJetStreamRemoved is "true" when the stream no longer held the
	// message at ingest (its limits removed it): the entry has no body.
	HeaderJetStreamRemoved = "x-lily-jetstream-removed"
)

// Values of HeaderJetStreamAdvisory.
const (
	JetStreamMaxDeliveries = "max_deliveries"
	JetStreamTerminated    = "terminated"
)

// decodeJetStream reads the advisory headers of a JetStream dead letter.
func decodeJetStream(v *view) (ForeignEvidence, bool) {
	kind := v.text(HeaderJetStreamAdvisory)
	if kind == "" {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System: SystemJetStream,
		Origin: HeaderJetStreamPrefix + "*",
		Reason: kind,
		Source: v.text(HeaderJetStreamStream) + "/" + v.text(HeaderJetStreamConsumer),
		Raw:    v.raw(HeaderJetStreamPrefix),
	}
	if r := v.text(HeaderJetStreamTermReason); r != "" {
		e.Message = r
	}
	if v.text(HeaderJetStreamRemoved) == "true" {
		e.Message = strings.TrimPrefix(e.Message+"; ", "; ") + "the stream's limits removed the message before it was ingested: no body"
	}
	if n, err := strconv.Atoi(v.text(HeaderJetStreamDeliveries)); err == nil {
		e.Count = n
	}
	if n, err := strconv.ParseInt(v.text(HeaderJetStreamSequence), 10, 64); err == nil {
		e.Offset, e.HasOffset = n, true
	}
	if ts, err := time.Parse(time.RFC3339Nano, v.text(HeaderJetStreamTime)); err == nil {
		e.Time = ts.UTC()
	}
	return e, true
}

// jetstreamReason maps a JetStream advisory to a Lily reason: MaxDeliver is
// delivery_limit, a terminated message rejected.
func jetstreamReason(v *view) (Reason, bool) {
	switch v.text(HeaderJetStreamAdvisory) {
	case JetStreamMaxDeliveries:
		return ReasonDeliveryLimit, true
	case JetStreamTerminated:
		return ReasonRejected, true
	}
	return "", false
}
