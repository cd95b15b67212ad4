package ledger

import (
	"context"
	"maps"

	"github.com/lily-mq/lily/evidence"
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

// marked reports whether d carries HeaderCounted.
func marked(d *transport.Delivery) bool {
	v, ok := d.Headers[HeaderCounted]
	if !ok {
		return false
	}
	switch v := v.(type) {
	case string:
		return v == "1"
	case []byte:
		return string(v) == "1"
	}
	return false
}

// markCounted returns ms with HeaderCounted set, each message's header
// map copied (the caller's is left alone; the values are shared, never
// changed).
func markCounted(ms []transport.Message) []transport.Message {
	out := make([]transport.Message, len(ms))
	for i, m := range ms {
		h := make(transport.Headers, len(m.Headers)+1)
		maps.Copy(h, m.Headers)
		h[HeaderCounted] = "1"
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
// or at settlement) or redriven from the dead-letter work list (accepted
// the first time it came, and under another key if an editor changed its
// body since).
func countedBefore(d *transport.Delivery) bool {
	return marked(d) || evidence.RedriveCount(d.Headers) > 0
}

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
