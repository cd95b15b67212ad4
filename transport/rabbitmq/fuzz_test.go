package rabbitmq

import (
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/fuzzval"
	"github.com/lily-mq/lily/transport"
)

// amqpValue turns a fuzzval value into what amqp091-go hands out for a
// delivery's headers: nested tables as amqp.Table, and some integers as
// AMQP decimals.
func amqpValue(r *fuzzval.Reader, v any) any {
	switch x := v.(type) {
	case map[string]any:
		t := amqp.Table{}
		for k, e := range x {
			t[k] = amqpValue(r, e)
		}
		if r.Byte()%3 == 0 {
			return map[string]any(t) // a plain map, as some callers build them
		}
		return t
	case []any:
		for i, e := range x {
			x[i] = amqpValue(r, e)
		}
		return x
	case int32:
		if r.Byte()%3 == 0 {
			return amqp.Decimal{Scale: r.Byte() % 20, Value: x}
		}
	}
	return v
}

var amqpNames = []string{evidence.HeaderRetryCount, headerDeliveryCount, headerPriorDeliveries, evidence.HeaderEventID, evidence.HeaderKey,
	evidence.HeaderType, "x-death", "tenant", evidence.HeaderSchemaVersion}

// checkHeaderTypes fails unless every value of h (recursively) is one of
// the types transport.Headers documents.
func checkHeaderTypes(t *testing.T, path string, v any) {
	t.Helper()
	switch x := v.(type) {
	case nil, string, []byte, bool, int8, int16, int32, int64, uint8, uint16, uint32, float32, float64, time.Time, int:
	case transport.Decimal:
		// an AMQP decimal, kept as Lily's decimal (issue 12 item 9)
	case []any:
		for i, e := range x {
			checkHeaderTypes(t, path+"["+strconv.Itoa(i)+"]", e)
		}
	case map[string]any:
		for k, e := range x {
			checkHeaderTypes(t, path+"."+k, e)
		}
	default:
		t.Fatalf("header %s: %T is not a transport.Headers type", path, v)
	}
}

// wire is what a header value becomes when amqp091-go writes it into a
// frame and the broker hands it back (amqp091-go's writeField and
// readField): int is written as a long-int ('I', 32 bits, truncated), a
// timestamp keeps whole seconds, every other type its own field type.
func wire(v any) any {
	switch x := v.(type) {
	case int:
		return int32(uint32(x))
	case time.Time:
		return time.Unix(x.Unix(), 0)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = wire(e)
		}
		return out
	case amqp.Table:
		out := amqp.Table{}
		for k, e := range x {
			out[k] = wire(e)
		}
		return out
	}
	return v
}

// sameAfterWire compares a header as Lily had it with what came back over
// the wire: times at whole seconds and int as int64; every other type
// (unsigned integers included, issue 12 item 9) as it was.
func sameAfterWire(sent, got any) bool {
	return fuzzval.SameNested(sent, got, func(sent, got any) bool {
		switch x := sent.(type) {
		case int:
			return got == int64(x) // sent as long-long-int
		case time.Time:
			y, ok := got.(time.Time)
			return ok && y.Unix() == x.Unix()
		}
		return fuzzval.Same(sent, got)
	})
}

// FuzzAMQPHeaders: the AMQP header codec. fromTable (amqp.Table →
// transport.Headers) never panics and gives only transport.Headers types
// (decimals as decimal text, or kept); the headers convert back to a valid
// AMQP table (toValue, publishing) and converting again changes nothing;
// a delivery's count is >= 1 whatever x-delivery-count says.
func FuzzAMQPHeaders(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add([]byte{3, 1, fuzzval.KindInt32, 0, 0, 0, 0, 0, 0, 0, 2, 5, fuzzval.KindInt64, 0, 0, 0, 0, 0, 0, 0, 4,
		9, fuzzval.KindTable, 2, 1, fuzzval.KindString, 1, 'x', 1, fuzzval.KindList, 2, fuzzval.KindInt32}, true)
	f.Add([]byte{1, 5, fuzzval.KindInt64, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true)
	f.Fuzz(func(t *testing.T, data []byte, redelivered bool) {
		r := fuzzval.NewReader(data)
		raw := r.Headers(amqpNames, 3)
		table := amqpValue(r, raw)
		var tbl amqp.Table
		switch x := table.(type) {
		case amqp.Table:
			tbl = x
		case map[string]any:
			tbl = amqp.Table(x)
		}
		if tbl.Validate() != nil {
			return // not something amqp091-go would hand out
		}
		h := fromTable(tbl)
		for k, v := range h {
			checkHeaderTypes(t, k, v)
			if d, ok := tbl[k].(amqp.Decimal); ok {
				if got, ok := v.(transport.Decimal); !ok || got.Scale != d.Scale || got.Value != d.Value {
					t.Fatalf("decimal %+v read as %#v, want transport.Decimal with the same scale and value", d, v)
				}
			}
		}
		// Back to AMQP: valid, and stable from then on.
		m := transport.Message{EventID: "e", Headers: h}
		p, err := publishing(m, nil)
		if err != nil {
			t.Fatalf("publishing of decoded headers: %v\nheaders %#v", err, h)
		}
		if _, ok := p.Headers[headerDeliveryCount]; ok {
			t.Fatal("x-delivery-count copied onto a publish")
		}
		h2 := fromTable(wire(p.Headers).(amqp.Table))
		for k, v := range h {
			if k == headerDeliveryCount || k == headerPriorDeliveries || k == evidence.HeaderEventID {
				continue
			}
			if !sameAfterWire(v, h2[k]) {
				t.Fatalf("header %q changed on the way through the broker: %#v -> %#v", k, v, h2[k])
			}
		}
		// A header set in code (lily.Publish) as a Go int survives too.
		if n := int(r.Uint64()); true {
			pi, err := publishing(transport.Message{EventID: "e", Headers: transport.Headers{"n": n}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			back := fromTable(wire(pi.Headers).(amqp.Table))["n"]
			if got, ok := back.(int64); !ok || got != int64(n) {
				t.Fatalf("int header %d arrived as %#v", n, back)
			}
		}
		p2, err := publishing(transport.Message{EventID: "e", Headers: h2}, nil)
		if err != nil || !fuzzval.Same(map[string]any(fromTable(p2.Headers)), map[string]any(h2)) {
			t.Fatalf("second round trip not stable: %v", err)
		}
		// A delivery: count >= 1, event ID from message_id or the header.
		d := delivery("q", &amqp.Delivery{Headers: tbl, MessageId: r.Text(), Redelivered: redelivered})
		if d.DeliveryCount < 1 {
			t.Fatalf("delivery count %d from x-delivery-count %#v", d.DeliveryCount, tbl[headerDeliveryCount])
		}
		if d.EventID == "" {
			if s, ok := h[evidence.HeaderEventID].(string); ok && s != "" {
				t.Fatalf("event ID header %q not used", s)
			}
		}
	})
}
