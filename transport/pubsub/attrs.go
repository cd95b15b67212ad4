package pubsub

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// The Pub/Sub service's limits on one message. pstest enforces none of
// them, so Lily does, before publishing.
const (
	MaxAttributes     = 100
	MaxAttributeKey   = 256
	MaxAttributeValue = 1024
	MaxMessageBytes   = 10 << 20
	MaxOrderingKey    = 1024
)

// Transport-owned attributes, written by the transport and removed before
// a delivery reaches the runtime.
const (
	// AttrPacked prefixes the chunks of Lily's packed headers:
	// "x-lily-packed.000", "x-lily-packed.001", ... Concatenated in order
	// they are the typed JSON of transport.MarshalHeaders.
	AttrPacked = "x-lily-packed."
	// AttrDueAt is when a retry copy in a delay topic is due, in Unix
	// milliseconds (decimal text).
	AttrDueAt = "x-lily-due-at"
	// AttrPriorDeliveries is carried by a copy Lily gave back in place of
	// a redelivery no handler saw (see Transport.giveBack): how many
	// delivery attempts the message had before that one, as decimal text
	// (evidence.HeaderPriorDeliveries). The copy's count goes on from there.
	AttrPriorDeliveries = evidence.HeaderPriorDeliveries
)

// HeaderEvidenceTrimmed is set ("true") on a dead-letter copy whose
// evidence Lily shortened to fit the service's limits.
const HeaderEvidenceTrimmed = "x-lily-evidence-trimmed"

// ErrLimit means a message does not fit the Pub/Sub service's limits.
var ErrLimit = errors.New("pubsub: message exceeds Pub/Sub limits")

// plain reports whether header k=v travels as a plain attribute: a string
// key and value within the service's limits and not transport-owned.
func plain(k string, v any) bool {
	s, ok := v.(string)
	return ok && validKey(k) && len(s) <= MaxAttributeValue && utf8.ValidString(s)
}

func validKey(k string) bool {
	return k != "" && len(k) <= MaxAttributeKey && utf8.ValidString(k) && !strings.HasPrefix(k, "goog") &&
		!strings.HasPrefix(k, AttrPacked) && k != AttrDueAt && k != AttrPriorDeliveries
}

// EncodeAttributes turns Lily headers into Pub/Sub attributes. A string
// header whose name and value fit the limits (name ≤ 256 bytes, value ≤
// 1024 bytes, UTF-8, name not starting with "goog") is one attribute with
// the same name and value — so every attribute a foreign producer sent
// comes back exactly as sent. Every other header (int32, bool, bytes,
// tables, AMQP decimals, long strings such as a stack trace) is packed:
// the typed JSON of transport.MarshalHeaders, split into chunks of at most
// 1024 bytes named x-lily-packed.000, .001, ..., so that its Go type comes
// back on decode. internal attributes (AttrDueAt) are added as they are.
// The result must fit 100 attributes, else ErrLimit.
func EncodeAttributes(h transport.Headers, internal map[string]string) (map[string]string, error) {
	attrs := make(map[string]string, len(h)+len(internal)+1)
	var packed transport.Headers
	for k, v := range h {
		if plain(k, v) {
			attrs[k] = v.(string)
			continue
		}
		if packed == nil {
			packed = transport.Headers{}
		}
		packed[k] = v
	}
	for k, v := range internal {
		attrs[k] = v
	}
	if len(packed) > 0 {
		js, err := transport.MarshalHeaders(packed)
		if err != nil {
			return nil, fmt.Errorf("pubsub: pack headers: %w", err)
		}
		for i, c := range chunk(string(js), MaxAttributeValue) {
			attrs[AttrPacked+fmt.Sprintf("%03d", i)] = c
		}
	}
	if len(attrs) > MaxAttributes {
		if lean, ok := transport.DropHint(h); ok {
			return EncodeAttributes(lean, internal) // the mark alone never refuses a message
		}
		return nil, fmt.Errorf("%w: %d attributes (%d packed chunks), at most %d: shorten or drop headers", ErrLimit, len(attrs), len(attrs)-len(h)-len(internal)+len(packed), MaxAttributes)
	}
	return attrs, nil
}

// chunk splits s into pieces of at most n bytes, at rune boundaries.
func chunk(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

// DecodeAttributes is the inverse of EncodeAttributes: plain attributes
// become string headers, the packed chunks their typed headers. It returns
// the transport-owned attributes apart. Packed chunks that do not decode
// (a foreign producer's attribute named like them) stay plain strings.
func DecodeAttributes(attrs map[string]string) (h transport.Headers, internal map[string]string) {
	h = make(transport.Headers, len(attrs))
	var chunks []string
	for k, v := range attrs {
		switch {
		case strings.HasPrefix(k, AttrPacked):
			chunks = append(chunks, k)
		case k == AttrDueAt, k == AttrPriorDeliveries:
			if internal == nil {
				internal = map[string]string{}
			}
			internal[k] = v
		default:
			h[k] = v
		}
	}
	if len(chunks) == 0 {
		return h, internal
	}
	sort.Strings(chunks)
	var b strings.Builder
	for _, k := range chunks {
		b.WriteString(attrs[k])
	}
	packed, err := transport.UnmarshalHeaders([]byte(b.String()))
	if err != nil {
		for _, k := range chunks {
			h[k] = attrs[k]
		}
		return h, internal
	}
	for k, v := range packed {
		h[k] = v
	}
	return h, internal
}

// messageSize is what the service counts against its 10 MB: data,
// attribute names and values, ordering key.
func messageSize(m *pubsubpb.PubsubMessage) int {
	n := len(m.Data) + len(m.OrderingKey)
	for k, v := range m.Attributes {
		n += len(k) + len(v)
	}
	return n
}

// toPubsub builds the Pub/Sub message of m with headers h (the complete
// headers of the copy) and the transport's internal attributes. The event
// ID and type travel as x-lily-event-id and x-lily-type, the key as the
// ordering key.
func toPubsub(m transport.Message, h transport.Headers, internal map[string]string) (*pubsubpb.PubsubMessage, error) {
	all := make(transport.Headers, len(h)+2)
	for k, v := range h {
		all[k] = v
	}
	if m.EventID != "" {
		all[evidence.HeaderEventID] = m.EventID
	}
	if m.Type != "" {
		all[evidence.HeaderType] = m.Type
	}
	if len(m.Key) > MaxOrderingKey {
		return nil, fmt.Errorf("%w: key of %d bytes, ordering keys hold at most %d", ErrLimit, len(m.Key), MaxOrderingKey)
	}
	attrs, err := EncodeAttributes(all, internal)
	if err != nil {
		return nil, err
	}
	pm := &pubsubpb.PubsubMessage{Data: m.Body, Attributes: attrs, OrderingKey: m.Key}
	if s := messageSize(pm); s > MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d bytes with attributes, at most %d", ErrLimit, s, MaxMessageBytes)
	}
	return pm, nil
}

// fromPubsub reads a Pub/Sub message: headers, event ID (x-lily-event-id,
// else the Pub/Sub message ID), type, key (the ordering key).
func fromPubsub(pm *pubsubpb.PubsubMessage) (transport.Message, map[string]string) {
	h, internal := DecodeAttributes(pm.Attributes)
	m := transport.Message{Body: pm.Data, Headers: h, Key: pm.OrderingKey}
	if id, ok := h[evidence.HeaderEventID].(string); ok && id != "" {
		m.EventID = id
	} else {
		m.EventID = pm.MessageId
	}
	m.Type, _ = h[evidence.HeaderType].(string)
	if len(h) == 0 {
		m.Headers = nil
	}
	return m, internal
}

// evidenceShrink lists Lily's own evidence headers in the order they are
// given up when a dead-letter copy does not fit: the stack first, then
// the attempt history and the rest of the history. A header the failed
// delivery carried (the producer's, or a history a retry copy brought) is
// never touched.
var evidenceShrink = []string{evidence.HeaderErrorStack, evidence.HeaderAttempts, evidence.HeaderConsumerVersion, evidence.HeaderHost,
	evidence.HeaderFirstFailureAt, evidence.HeaderLastFailureAt, evidence.HeaderRawRetryCount}

// fitEvidence builds the dead-letter copy of d with headers h, giving up
// Lily's evidence (never the producer's headers) until it fits: the stack
// is first truncated to one attribute, then evidence headers are dropped
// in the order of evidenceShrink, and the error message is truncated last.
func fitEvidence(d *transport.Delivery, h transport.Headers) (*pubsubpb.PubsubMessage, error) {
	pm, err := toPubsub(d.Message, h, nil)
	if err == nil || !errors.Is(err, ErrLimit) {
		return pm, err
	}
	h = transport.CloneHeaders(h)
	h[HeaderEvidenceTrimmed] = "true"
	if s, ok := h[evidence.HeaderErrorStack].(string); ok && len(s) > MaxAttributeValue {
		h[evidence.HeaderErrorStack] = truncate(s, MaxAttributeValue)
		if pm, err = toPubsub(d.Message, h, nil); err == nil {
			return pm, nil
		}
	}
	for _, k := range evidenceShrink {
		if _, orig := d.Headers[k]; orig {
			continue
		}
		delete(h, k)
		if pm, err = toPubsub(d.Message, h, nil); err == nil {
			return pm, nil
		}
	}
	if s, ok := h[evidence.HeaderErrorMessage].(string); ok {
		h[evidence.HeaderErrorMessage] = truncate(s, 128)
		if pm, err = toPubsub(d.Message, h, nil); err == nil {
			return pm, nil
		}
	}
	return nil, fmt.Errorf("dead-letter copy of event %s does not fit even without Lily's optional evidence: %w", d.EventID, err)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// priorDeliveries reads AttrPriorDeliveries: an integer in 1..100, else 0.
func priorDeliveries(internal map[string]string) int {
	n, err := strconv.Atoi(internal[AttrPriorDeliveries])
	if err != nil || n < 1 || n > evidence.MaxPriorDeliveries {
		return 0
	}
	return n
}

// dueAt reads AttrDueAt.
func dueAt(internal map[string]string) (int64, bool) {
	v, ok := internal[AttrDueAt]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}
