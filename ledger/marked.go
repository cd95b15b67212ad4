package ledger

import (
	"context"
	"maps"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// HeaderCounted marks a message that an Accounted publisher counts as
// accepted when the broker confirms it (value "1"). A consumer whose
// ledger trusts the mark (trustsMarks) does not count such a delivery on
// receipt — the statement that would find its row and write nothing — and
// counts it when it settles instead: an ack of a message without a row
// counts it accepted and acked at once, and any other settlement counts
// it accepted. So a mark that lies (a publisher that died between the
// confirm and its count, a foreign producer copying the header) moves the
// count from the receipt to the settlement; it never hides a message.
// docs/catalog.md ("The ledger's counts") explains the cost it saves.
//
// A transport drops the mark rather than refuse a message that the mark
// alone would push over one of its broker's limits (transport.DropHint).
const HeaderCounted = transport.HeaderCounted

// HeaderAcceptedOn names, on a message an Accounted redrives to its queue
// (PublishParams.Redrive), the queue that accepted it before. A ledger that
// trusts marks counts such a delivery on that queue acked only, never
// accepted again — also when an editor changed its body, which gives it a
// new ledger key. A redirect to another queue carries none (or a stale one
// naming another queue): there the message is new and counted as any.
const HeaderAcceptedOn = transport.HeaderAcceptedOn

// marked reports whether d carries HeaderCounted.
func marked(d *transport.Delivery) bool { return hint(d, HeaderCounted) == "1" }

// acceptedHere reports whether d was redriven to the queue that accepted
// it before (HeaderAcceptedOn names d's queue).
func acceptedHere(d *transport.Delivery) bool {
	q := hint(d, HeaderAcceptedOn)
	return q != "" && q == d.Queue
}

// hint returns the text of header name on d: a string, or bytes as a
// transport without string headers hands them back; "" otherwise.
func hint(d *transport.Delivery, name string) string {
	switch v := d.Headers[name].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// markCounted returns ms with HeaderCounted set (see mark).
func markCounted(ms []transport.Message) []transport.Message {
	return mark(ms, HeaderCounted, "1")
}

// mark returns ms with header name set to value, each message's header
// map copied (the caller's is left alone; the values are shared, never
// changed).
func mark(ms []transport.Message, name, value string) []transport.Message {
	out := make([]transport.Message, len(ms))
	for i, m := range ms {
		h := make(transport.Headers, len(m.Headers)+1)
		maps.Copy(h, m.Headers)
		h[name] = value
		m.Headers = h
		out[i] = m
	}
	return out
}

// trustsMarks reports whether counting may skip marked deliveries on
// receipt: on PostgreSQL, once the ledger holds no rows of an older Lily
// (whose statements, kept for them, do not count an unmatched ack as
// accepted). On SQLite every receipt is counted, as before.
func (l *Ledger) trustsMarks(ctx context.Context) (bool, error) {
	if l.db.Dialect() != catalogdb.Postgres {
		return false, nil
	}
	legacy, err := l.hasLegacy(ctx)
	return !legacy, err
}

// countedBefore reports whether a ledger that trusts marks leaves d's
// acceptance to someone else: marked by its publisher (counted on publish,
// or at settlement) or redriven to the queue that accepted it before.
func countedBefore(d *transport.Delivery) bool { return marked(d) || acceptedHere(d) }

// uncounted returns the deliveries of ds that are not countedBefore.
func uncounted(ds []*transport.Delivery) []*transport.Delivery {
	var out []*transport.Delivery
	for _, d := range ds {
		if !countedBefore(d) {
			out = append(out, d)
		}
	}
	return out
}
