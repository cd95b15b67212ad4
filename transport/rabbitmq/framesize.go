package rabbitmq

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
)

// The properties of an AMQP message, headers included, travel in one
// content-header frame, which may not be larger than the connection's
// negotiated frame_max: the broker answers a larger one by closing the
// whole connection (every delivery in flight on it comes back with its
// count raised). So every publish is measured first; a hand-off copy
// whose headers do not fit has Lily's own evidence cut down to fit (never
// the original headers), and a message that still does not fit fails
// alone, with ErrFrameTooLarge, the connection untouched (docs/design.md §7).

// ErrFrameTooLarge: the message's properties and headers do not fit in one
// frame of the connection's negotiated frame_max, even with Lily's evidence
// cut down; it was not published.
var ErrFrameTooLarge = errors.New("rabbitmq: message headers do not fit in one frame (frame_max)")

// HeaderEvidenceTruncated lists, comma-separated, the evidence headers Lily
// dropped or shortened so that a copy fits in the connection's frame_max.
const HeaderEvidenceTruncated = "x-lily-evidence-truncated"

// frameOverhead is an AMQP frame's type, channel, size and frame-end.
const frameOverhead = 1 + 2 + 4 + 1

// The broker adds headers to a message on its way, and a client (amqp091
// among them) refuses a delivery whose header frame is over frame_max by
// closing its connection (checked on RabbitMQ 3.10: the broker confirms a
// header frame up to 8 bytes over, and amqp091 then cannot read it). So a
// copy leaves room for what the broker will add:
//   - a dead-letter copy: x-delivery-count (a long-long-int, 26 bytes),
//     added when the DLQ hands it out again (a peek before the ingest);
//   - a retry copy: also the x-death table and x-first-death-* (and, on
//     newer brokers, x-last-death-*) headers that the bucket's expiry adds,
//     which name the bucket and the queue.
const deadLetterHeadroom = 64

// retryHeadroom is the room a retry copy leaves under frame_max for the
// broker's headers (see deadLetterHeadroom).
func retryHeadroom(bucket, queue string) int { return 512 + 3*len(bucket) + len(queue) }

// headerFrameSize is the size in bytes of the content-header frame of p,
// as amqp091 writes it: class, weight, body size, property flags and the
// properties that are set.
func headerFrameSize(p *amqp.Publishing) int {
	n := frameOverhead + 2 + 2 + 8 + 2
	for _, s := range []string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if len(p.Headers) > 0 {
		n += tableSize(p.Headers)
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// tableSize is the encoded size of an AMQP field table: its 4-byte length
// and each key (short string) and value.
func tableSize(t amqp.Table) int {
	n := 4
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

// fieldSize is the encoded size of one field value, type octet included,
// for the Go types amqp091 writes (see its writeField). Values it cannot
// write are refused by Table.Validate before anything is measured.
func fieldSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case int64, float64, time.Time:
		return 9
	case amqp.Decimal:
		return 6
	case string:
		return 5 + len(x)
	case []byte:
		return 5 + len(x)
	case []any:
		n := 5
		for _, e := range x {
			n += fieldSize(e)
		}
		return n
	case amqp.Table:
		return 1 + tableSize(x)
	}
	return 1
}

// cuttable lists Lily's evidence headers in the order they are given up
// when a copy does not fit: the stack first, then the attempt history
// (the last error stays in its own headers), the raw value of an
// invalid retry count (the original header keeps it), the error message
// (shortened before it is dropped), the consumer's identity, the failure
// times, the source coordinates, the error type. Never cut: the event ID,
// reason, retry and redrive counts, source, delivery count, dead-lettering
// time, key, type and hold key, nor any header the original carried.
var cuttable = []string{
	evidence.HeaderErrorStack,
	evidence.HeaderAttempts,
	evidence.HeaderRawRetryCount,
	evidence.HeaderErrorMessage,
	evidence.HeaderHost,
	evidence.HeaderConsumerVersion,
	evidence.HeaderConsumer,
	evidence.HeaderFirstFailureAt,
	evidence.HeaderLastFailureAt,
	evidence.HeaderSourceMessageID,
	evidence.HeaderSourceOffset,
	evidence.HeaderSourcePartition,
	evidence.HeaderErrorType,
}

// truncatedSuffix ends an error message that was shortened to fit.
const truncatedSuffix = " …[truncated to fit frame_max]"

// fitEvidence cuts Lily's evidence in p.Headers (headers that orig, the
// delivery's own headers, does not carry with the same value) until the
// header frame fits in frameMax less headroom, and records what it cut in
// HeaderEvidenceTruncated. It returns the names cut (nil when p fitted as
// it was), or ErrFrameTooLarge when even the uncuttable headers do not fit
// (p is then left cut down).
func fitEvidence(p *amqp.Publishing, orig amqp.Table, frameMax, headroom int) ([]string, error) {
	if frameMax <= 0 {
		return nil, nil // no limit negotiated
	}
	limit := frameMax - headroom
	size := headerFrameSize(p)
	if size <= limit {
		return nil, nil
	}
	over := size - limit
	mine := func(k string) bool {
		v, ok := p.Headers[k]
		if !ok {
			return false
		}
		o, had := orig[k]
		return !had || !comparableEqual(o, v)
	}
	var cut []string
	mark := func() {
		p.Headers[HeaderEvidenceTruncated] = strings.Join(cut, ",")
		size = headerFrameSize(p)
		over = size - limit
	}
	for _, k := range cuttable {
		if over <= 0 {
			break
		}
		if !mine(k) {
			continue
		}
		if k == evidence.HeaderErrorMessage {
			if s, ok := p.Headers[k].(string); ok {
				cut = append(cut, k+"(shortened)")
				mark()
				// The marker's own size is in over now.
				if keep := len(s) - over - len(truncatedSuffix); keep >= 64 {
					for keep > 0 && !utf8.RuneStart(s[keep]) {
						keep--
					}
					p.Headers[k] = s[:keep] + truncatedSuffix
					mark()
					continue
				}
				cut[len(cut)-1] = k
			}
		} else {
			cut = append(cut, k)
		}
		delete(p.Headers, k)
		mark()
	}
	if over > 0 {
		return cut, fmt.Errorf("%w: the copy's header frame takes %d bytes, the connection's frame_max is %d "+
			"and %d bytes stay free for the headers the broker adds on the way; the message's own headers leave "+
			"no room even for Lily's essential evidence (cut: %v): raise frame_max on the broker and client, "+
			"or have the producer send smaller headers",
			ErrFrameTooLarge, size, frameMax, headroom, cut)
	}
	return cut, nil
}

// comparableEqual reports whether two header values of a comparable type
// are equal (tables, arrays and byte strings are treated as different:
// Lily writes none of its evidence as those).
func comparableEqual(a, b any) bool {
	switch a.(type) {
	case amqp.Table, []any, []byte:
		return false
	}
	switch b.(type) {
	case amqp.Table, []any, []byte:
		return false
	}
	return a == b
}

// frameMax is the frame_max negotiated on the current connection (0: no
// limit).
func (t *Transport) frameMax() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxFrame
}
