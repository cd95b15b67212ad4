package rabbitmq

import (
	"fmt"
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// headerDeliveryCount is the quorum queue's count of earlier deliveries
// (absent on a first delivery). It belongs to the broker, not the message:
// it is not copied onto retry or dead-letter copies.
const headerDeliveryCount = "x-delivery-count"

// fromTable converts AMQP header values to Lily's header types (nested
// tables become map[string]any; decimals become their decimal text).
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
		return decimalText(x)
	}
	return v
}

func decimalText(d amqp.Decimal) string {
	s := strconv.FormatInt(int64(d.Value), 10)
	if d.Scale == 0 {
		return s
	}
	neg := d.Value < 0
	if neg {
		s = s[1:]
	}
	for len(s) <= int(d.Scale) {
		s = "0" + s
	}
	s = s[:len(s)-int(d.Scale)] + "." + s[len(s)-int(d.Scale):]
	if neg {
		s = "-" + s
	}
	return s
}

// toValue converts a Lily header value to an AMQP one.
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
	case uint8:
		return int16(x)
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
		if k != headerDeliveryCount {
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
	out.EventID = d.MessageId
	if out.EventID == "" {
		out.EventID, _ = h[evidence.HeaderEventID].(string)
	}
	out.Key, _ = h[evidence.HeaderKey].(string)
	out.Type = d.Type
	if out.Type == "" {
		out.Type, _ = h[evidence.HeaderType].(string)
	}
	out.DeliveryCount = 1
	// A count outside 0..MaxInt32-1 is not the broker's (a forged or
	// copied header): ignored, so that the 1-based count never wraps or
	// goes below 1 (found by FuzzAMQPHeaders).
	var n int64 = -1
	switch x := h[headerDeliveryCount].(type) {
	case int64:
		n = x
	case int32:
		n = int64(x)
	}
	switch {
	case n >= 0 && n < math.MaxInt32:
		out.DeliveryCount = int(n) + 1
	case d.Redelivered:
		out.DeliveryCount = 2
	}
	return out
}
