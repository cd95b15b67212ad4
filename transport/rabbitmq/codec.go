package rabbitmq

import (
	"fmt"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// headerDeliveryCount is the quorum queue's count of earlier deliveries,
// set by the broker on a redelivery. It belongs to the broker, not the
// message: it is not copied onto retry or dead-letter copies of a
// redelivery.
const headerDeliveryCount = "x-delivery-count"

// headerPriorDeliveries is carried by a give-back copy (consumer.spill):
// see evidence.HeaderPriorDeliveries.
const headerPriorDeliveries = evidence.HeaderPriorDeliveries

// fromTable converts AMQP header values to Lily's header types, keeping
// every value's AMQP type (docs/design.md §7: headers travel as sent): nested
// tables become map[string]any, decimals transport.Decimal; the unsigned
// integers, int8, byte arrays and the rest are the same Go types already.
func fromTable(t amqp.Table) transport.Headers {
	if t == nil {
		return nil
	}
	if plainTable(t) {
		// Nothing to convert: the delivery's own table (decoded for this
		// delivery alone) becomes its headers, without a copy.
		return transport.Headers(t)
	}
	h := make(transport.Headers, len(t))
	for k, v := range t {
		h[k] = fromValue(v)
	}
	return h
}

// plainTable reports whether no value of t needs fromValue's conversion
// (no nested table, array or decimal).
func plainTable(t amqp.Table) bool {
	for _, v := range t {
		switch v.(type) {
		case amqp.Table, map[string]any, []any, amqp.Decimal:
			return false
		}
	}
	return true
}

func fromValue(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return fromTable(x)
	case map[string]any:
		return fromTable(amqp.Table(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromValue(e)
		}
		return out
	case amqp.Decimal:
		return transport.Decimal{Scale: x.Scale, Value: x.Value}
	}
	return v
}

// toValue converts a Lily header value to the AMQP one of the same type.
// Go's int, which amqp091 would write as a 32-bit long-int (truncating),
// is written as a long-long-int.
func toValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = toValue(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toValue(e)
		}
		return out
	case transport.Decimal:
		return amqp.Decimal{Scale: x.Scale, Value: x.Value}
	case int:
		// amqp091-go writes a Go int as a 32-bit long-int, truncating it:
		// send it as long-long-int, as Kafka and SQLite store int (found
		// by FuzzAMQPHeaders).
		return int64(x)
	}
	return v
}

// publishing builds the AMQP message of m: message_id is the event ID,
// and the event ID, key and type also travel as Lily headers.
func publishing(m transport.Message, props *amqp.Delivery) (amqp.Publishing, error) {
	// One new table, converted from m.Headers in a single pass (m.Headers
	// itself is not changed; the table lives until the frame is written).
	t := make(amqp.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		// The broker's count is not copied; a header of that name that
		// came with a first delivery is the message's own (a shovel, a
		// republisher) and travels as sent.
		if k == headerPriorDeliveries {
			continue // the count is carried only by a give-back (spill), never by another copy
		}
		if k != headerDeliveryCount || (props != nil && !props.Redelivered) {
			t[k] = toValue(v)
		}
	}
	t[evidence.HeaderEventID] = m.EventID
	if m.Key != "" {
		t[evidence.HeaderKey] = m.Key
	}
	if m.Type != "" {
		t[evidence.HeaderType] = m.Type
	}
	if err := t.Validate(); err != nil {
		return amqp.Publishing{}, fmt.Errorf("rabbitmq: headers: %w", err)
	}
	p := amqp.Publishing{
		Headers:      t,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.EventID,
		Type:         m.Type,
		Body:         m.Body,
		Timestamp:    time.Now().UTC().Truncate(time.Second),
	}
	if props != nil {
		// A copy keeps the original's properties; never its per-message
		// TTL, which would expire it silently in a bucket or the DLQ.
		p.ContentType = props.ContentType
		p.ContentEncoding = props.ContentEncoding
		p.Priority = props.Priority
		p.CorrelationId = props.CorrelationId
		p.ReplyTo = props.ReplyTo
		p.UserId = props.UserId
		p.AppId = props.AppId
		if !props.Timestamp.IsZero() {
			p.Timestamp = props.Timestamp
		}
		if p.Type == "" {
			p.Type = props.Type
		}
	}
	return p, nil
}

// delivery converts an AMQP delivery.
func delivery(queue string, d *amqp.Delivery) *transport.Delivery {
	h := fromTable(d.Headers)
	out := &transport.Delivery{Queue: queue, MessageID: d.MessageId, EnqueuedAt: d.Timestamp}
	out.Body = d.Body
	out.Headers = h
	out.EventID, out.ContentID = eventID(queue, d) // identity.go: message_id, x-lily-event-id, else synthetic
	out.Key, _ = h[evidence.HeaderKey].(string)
	out.Type = d.Type
	if out.Type == "" {
		out.Type, _ = h[evidence.HeaderType].(string)
	}
	out.DeliveryCount = deliveryCount(d)
	return out
}

// deliveryCount is the 1-based count of a delivery: the broker's, plus the
// hand-outs a give-back copy carries (headerPriorDeliveries). The broker's
// x-delivery-count is trusted only on a redelivery: on a first delivery a
// header of that name was sent by the publisher (a shovel, a service that
// republishes what it consumed, a forgery) and the count is 1 (docs/design.md §7).
func deliveryCount(d *amqp.Delivery) int {
	return brokerCount(d) + priorDeliveries(d.Headers)
}

// priorDeliveries is the count a give-back copy carries: an integer header
// in 1..evidence.MaxPriorDeliveries, else 0.
func priorDeliveries(h amqp.Table) int {
	return evidence.PriorDeliveries(h[headerPriorDeliveries])
}

// brokerCount is the broker's 1-based count of a delivery.
func brokerCount(d *amqp.Delivery) int {
	if !d.Redelivered {
		return 1
	}
	switch n := d.Headers[headerDeliveryCount].(type) {
	case int64:
		if n > 0 && n < math.MaxInt32 {
			return int(n) + 1
		}
	case int32:
		if n > 0 && n < math.MaxInt32 {
			return int(n) + 1
		}
	}
	return 2
}
