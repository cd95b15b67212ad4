package rabbitmq

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"sort"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
)

// SyntheticIDPrefix starts the event ID Lily derives for a RabbitMQ message
// that carries none (see EventID).
const SyntheticIDPrefix = "syn-"

// EventID is the event ID (docs/design.md §2, §7) of a message received from queue,
// whoever published it:
//
//  1. the AMQP message_id property, when set (Lily's publisher sets it to
//     the event ID; most other clients set their own or none);
//  2. else the x-lily-event-id header (text);
//  3. else a synthetic ID, SyntheticIDPrefix followed by 32 hex digits of
//     the SHA-256 of: the source queue (queue with a ".dlq.v2" suffix
//     removed, so that a DLQ copy read from the DLQ names its source), the
//     body, the original headers in a canonical, type-tagged encoding, and
//     the properties that travel with the message (content type and
//     encoding, correlation ID, reply-to, type, user and app ID, timestamp,
//     priority).
//
// The synthetic ID leaves out everything the broker or Lily adds or changes
// on the way, so it is the same on every redelivery and on the broker's own
// dead letter of the message: the headers x-death, x-first-death-*,
// x-last-death-*, x-delivery-count, x-retry-count and every x-lily-*
// header; the delivery mode; the expiration (the broker drops it when it
// dead-letters). Lily's retry and DLQ copies carry the ID as message_id
// (rule 1), so retries, redrive and deduplication keep it too.
//
// Two messages with the same body, headers and properties in the same
// queue get the same synthetic ID: they cannot be told apart, and the
// ledger and the catalog count them as one message (docs/design.md §9). Nothing
// the broker adds tells them apart either: a quorum queue's delivery
// carries no per-message ID, and the delivery tag is the channel's
// sequence number, new on every redelivery. A producer that sends such
// twins on purpose should set a message_id; a handler's inbox reports the
// twins it sees (docs/inbox.md, "Messages without an ID").
func EventID(queue string, d *amqp.Delivery) string {
	id, _ := eventID(queue, d)
	return id
}

// eventID is EventID, and whether the ID is a content ID (synthetic): one
// derived here, or one a Lily copy of such a message carries (message_id
// and x-lily-event-id both set to a synthetic ID).
func eventID(queue string, d *amqp.Delivery) (id string, content bool) {
	header, _ := d.Headers[evidence.HeaderEventID].(string)
	if d.MessageId != "" {
		return d.MessageId, d.MessageId == header && strings.HasPrefix(header, SyntheticIDPrefix)
	}
	if header != "" {
		return header, false
	}
	return syntheticID(queue, d), true
}

func syntheticID(queue string, d *amqp.Delivery) string {
	h := sha256.New()
	field := func(tag byte, s string) {
		h.Write([]byte{tag})
		writeLen(h, len(s))
		h.Write([]byte(s))
	}
	field('q', strings.TrimSuffix(queue, ".dlq."+TopologyVersion))
	field('b', string(d.Body))
	h.Write([]byte{'h'})
	writeTable(h, d.Headers, true)
	field('c', d.ContentType)
	field('e', d.ContentEncoding)
	field('r', d.CorrelationId)
	field('p', d.ReplyTo)
	field('t', d.Type)
	field('u', d.UserId)
	field('a', d.AppId)
	ts := int64(0)
	if !d.Timestamp.IsZero() {
		ts = d.Timestamp.Unix()
	}
	field('s', fmt.Sprint(ts))
	field('y', fmt.Sprint(d.Priority))
	return SyntheticIDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// addedHeader reports whether a header is one the broker or Lily adds or
// changes on the way (left out of the synthetic ID).
func addedHeader(name string) bool {
	switch name {
	case "x-death", headerDeliveryCount, evidence.HeaderRetryCount:
		return true
	}
	return strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-") ||
		strings.HasPrefix(name, "x-lily-")
}

func writeLen(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

// writeTable writes t in a canonical encoding: keys sorted, each value
// tagged with its AMQP type, so that equal tables hash equally and tables
// that differ in a value's type do not. top leaves out the added headers.
func writeTable(h hash.Hash, t amqp.Table, top bool) {
	keys := make([]string, 0, len(t))
	for k := range t {
		if !top || !addedHeader(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	writeLen(h, len(keys))
	for _, k := range keys {
		writeLen(h, len(k))
		h.Write([]byte(k))
		writeValue(h, t[k])
	}
}

func writeValue(h hash.Hash, v any) {
	num := func(tag byte, n uint64) {
		var b [9]byte
		b[0] = tag
		binary.BigEndian.PutUint64(b[1:], n)
		h.Write(b[:])
	}
	switch x := v.(type) {
	case nil:
		h.Write([]byte{'V'})
	case bool:
		if x {
			num('t', 1)
		} else {
			num('t', 0)
		}
	case int8:
		num('b', uint64(x))
	case uint8:
		num('B', uint64(x))
	case int16:
		num('s', uint64(x))
	case uint16:
		num('u', uint64(x))
	case int32:
		num('I', uint64(x))
	case uint32:
		num('i', uint64(x))
	case int64:
		num('l', uint64(x))
	case uint64:
		num('L', x)
	case int:
		num('l', uint64(x))
	case float32:
		num('f', uint64(math.Float32bits(x)))
	case float64:
		num('d', math.Float64bits(x))
	case amqp.Decimal:
		num('D', uint64(x.Scale)<<32|uint64(uint32(x.Value)))
	case string:
		h.Write([]byte{'S'})
		writeLen(h, len(x))
		h.Write([]byte(x))
	case []byte:
		h.Write([]byte{'x'})
		writeLen(h, len(x))
		h.Write(x)
	case time.Time:
		num('T', uint64(x.Unix()))
	case amqp.Table:
		h.Write([]byte{'F'})
		writeTable(h, x, false)
	case map[string]any:
		h.Write([]byte{'F'})
		writeTable(h, amqp.Table(x), false)
	case []any:
		h.Write([]byte{'A'})
		writeLen(h, len(x))
		for _, e := range x {
			writeValue(h, e)
		}
	default:
		s := fmt.Sprintf("%T:%v", v, v)
		h.Write([]byte{'?'})
		writeLen(h, len(s))
		h.Write([]byte(s))
	}
}
