package azqueue

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lily-mq/lily/transport"
)

// EnvelopeVersion is the version of the envelope this package writes. A
// reader refuses (handles as foreign text) an envelope of another version.
const EnvelopeVersion = 1

// envelopeKey is the envelope's version field: a JSON object with it is
// an envelope, whatever the order of its fields (another tool may write
// one, docs/azqueue.md).
const envelopeKey = `"lily_envelope"`

// Envelope is the JSON text of a Lily message on a Storage queue
// (docs/azqueue.md, "The envelope"). Storage queue messages carry one
// string and no headers: the envelope holds the identity, the typed headers
// (transport.MarshalHeaders) and the original body — as text when it is
// valid UTF-8 that XML can carry, else base64 — so that any JSON reader
// gets the body back byte for byte.
type Envelope struct {
	// Version is EnvelopeVersion.
	Version int `json:"lily_envelope"`
	// EventID, Key and Type are the message's identity fields.
	EventID string `json:"event_id,omitempty"`
	Key     string `json:"key,omitempty"`
	Type    string `json:"type,omitempty"`
	// Headers are the typed headers (transport.MarshalHeaders).
	Headers json.RawMessage `json:"headers,omitempty"`
	// Body is the original body when it is text; BodyBase64 otherwise.
	// Exactly one of them is set (both empty: an empty body).
	Body       *string `json:"body,omitempty"`
	BodyBase64 string  `json:"body_base64,omitempty"`
	// DequeueBase is the service's DequeueCount when Lily last rewrote the
	// message in place (a retry, a give-back): the delivery count is
	// DequeueCount less it, so that a retry's count starts again.
	DequeueBase int64 `json:"dequeue_base,omitempty"`
}

// decoded is a message read back: an envelope, or foreign text.
type decoded struct {
	EventID, Key, Type string
	Headers            transport.Headers
	Body               []byte
	Base               int64
	Envelope           bool
}

// xmlText reports whether s can travel as XML character data unchanged
// once JSON escaped it (JSON escapes the control characters below 0x20;
// XML forbids U+FFFE, U+FFFF and the surrogates).
func xmlText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r == 0xFFFE || r == 0xFFFF || (r >= 0xD800 && r <= 0xDFFF) {
			return false
		}
	}
	return true
}

// encode returns the envelope text of a message.
func encode(eventID, key, typ string, body []byte, h transport.Headers, base int64) (string, error) {
	e := Envelope{Version: EnvelopeVersion, EventID: eventID, Key: key, Type: typ, DequeueBase: base}
	if len(h) > 0 {
		raw, err := transport.MarshalHeaders(h)
		if err != nil {
			return "", fmt.Errorf("headers: %w", err)
		}
		e.Headers = raw
	}
	switch {
	case len(body) == 0:
	case xmlText(body):
		s := string(body)
		e.Body = &s
	default:
		e.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the body's "<" and "&" stay as they are; XML escapes them on the wire
	if err := enc.Encode(e); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// decode reads a message's text: a JSON object with the "lily_envelope"
// field of EnvelopeVersion is an envelope; anything else is foreign text
// (its bytes are the body). err says why an envelope was not readable (its
// text is then handled as foreign).
func decode(text string) (decoded, error) {
	foreign := decoded{Headers: transport.Headers{}, Body: []byte(text)}
	if t := strings.TrimLeft(text, " \t\r\n"); !strings.HasPrefix(t, "{") || !strings.Contains(t, envelopeKey) {
		return foreign, nil
	}
	var e Envelope
	if err := json.Unmarshal([]byte(text), &e); err != nil {
		// A JSON text that mentions the key without being an envelope
		// is a foreign message like any other.
		return foreign, nil
	}
	if e.Version != EnvelopeVersion {
		return foreign, fmt.Errorf("azqueue: envelope version %d: this Lily reads version %d", e.Version, EnvelopeVersion)
	}
	d := decoded{EventID: e.EventID, Key: e.Key, Type: e.Type, Headers: transport.Headers{}, Base: e.DequeueBase, Envelope: true}
	if len(e.Headers) > 0 {
		h, err := transport.UnmarshalHeaders(e.Headers)
		if err != nil {
			return foreign, fmt.Errorf("azqueue: envelope headers: %w", err)
		}
		d.Headers = h
	}
	switch {
	case e.Body != nil:
		d.Body = []byte(*e.Body)
	case e.BodyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(e.BodyBase64)
		if err != nil {
			return foreign, fmt.Errorf("azqueue: envelope body_base64: %w", err)
		}
		d.Body = b
	default:
		d.Body = []byte{}
	}
	return d, nil
}

// DecodeEnvelope reads the text of a Storage queue message as Lily does:
// ok reports an envelope (of EnvelopeVersion); otherwise body is the text
// itself. For tools that read Lily's queues and DLQs.
func DecodeEnvelope(text string) (e Envelope, body []byte, h transport.Headers, ok bool) {
	d, err := decode(text)
	if err != nil || !d.Envelope {
		return Envelope{}, []byte(text), transport.Headers{}, false
	}
	_ = json.Unmarshal([]byte(text), &e)
	return e, d.Body, d.Headers, true
}
