package nats

import (
	"fmt"
	"strings"
	"unicode/utf8"

	natsgo "github.com/nats-io/nats.go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// HeaderTyped carries, as Lily's typed JSON (transport.MarshalHeaders), the
// headers that NATS cannot carry as they are: values that are not text
// (x-retry-count is an integer, x-lily-attempts bytes), text with line
// breaks or edge spaces (an error stack), names NATS refuses. Everything
// else travels as a plain NATS header, readable by any NATS client.
const HeaderTyped = "x-lily-headers"

// natsPrefix and renamedPrefix: NATS acts on headers named "Nats-…"
// (Nats-Msg-Id deduplicates, Nats-Expected-* makes a publish fail), so a
// copy Lily publishes carries a received "Nats-X" as "x-lily-nats-X", and
// decoding gives it back its name: a give-back copy within the
// deduplication window is not dropped as a duplicate of its original.
const (
	natsPrefix    = "Nats-"
	renamedPrefix = "x-lily-nats-"
)

// encodeHeaders converts a message's identity and headers to NATS headers.
func encodeHeaders(m transport.Message, h transport.Headers) (natsgo.Header, error) {
	out := natsgo.Header{}
	if m.EventID != "" {
		out.Set(evidence.HeaderEventID, m.EventID)
	}
	if m.Key != "" {
		out.Set(evidence.HeaderKey, m.Key)
	}
	if m.Type != "" {
		out.Set(evidence.HeaderType, m.Type)
	}
	typed := transport.Headers{}
	for k, v := range h {
		switch k {
		case evidence.HeaderEventID, evidence.HeaderKey, evidence.HeaderType, HeaderTyped:
			continue // the transport's own, written above
		}
		name := k
		if len(k) >= len(natsPrefix) && strings.EqualFold(k[:len(natsPrefix)], natsPrefix) {
			name = renamedPrefix + k[len(natsPrefix):]
		}
		if s, ok := v.(string); ok && plainName(name) && plainValue(s) {
			out.Set(name, s)
			continue
		}
		typed[k] = v
	}
	if len(typed) > 0 {
		b, err := transport.MarshalHeaders(typed)
		if err != nil {
			return nil, fmt.Errorf("nats: encode headers of %s: %w", m.EventID, err)
		}
		out.Set(HeaderTyped, string(b))
	}
	return out, nil
}

// plainName reports whether NATS carries name as it is: printable ASCII
// without ':' (the wire format is "Name: value").
func plainName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// plainValue reports whether NATS gives s back byte for byte: valid UTF-8
// with no control characters (a line break ends a header) and no leading
// or trailing blanks (the parser trims them).
func plainValue(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	if s != strings.TrimSpace(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// decoded is a received message's identity and headers.
type decoded struct {
	EventID, Key, Type string
	Headers            transport.Headers
}

// decodeHeaders converts NATS headers back to Lily's: a header with one
// value is a string, with several a []any of strings; x-lily-headers
// restores the typed ones. A malformed x-lily-headers (not Lily's) stays a
// plain header, so that nothing a producer sent is dropped.
func decodeHeaders(h natsgo.Header) decoded {
	d := decoded{Headers: transport.Headers{}}
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		name := k
		if rest, ok := strings.CutPrefix(k, renamedPrefix); ok {
			name = natsPrefix + rest
		}
		switch k {
		case evidence.HeaderEventID:
			d.EventID = vs[0]
			continue
		case evidence.HeaderKey:
			d.Key = vs[0]
			continue
		case evidence.HeaderType:
			d.Type = vs[0]
			continue
		}
		if len(vs) == 1 {
			d.Headers[name] = vs[0]
			continue
		}
		many := make([]any, len(vs))
		for i, v := range vs {
			many[i] = v
		}
		d.Headers[name] = many
	}
	if raw, ok := d.Headers[HeaderTyped].(string); ok {
		if typed, err := transport.UnmarshalHeaders([]byte(raw)); err == nil {
			delete(d.Headers, HeaderTyped)
			for k, v := range typed {
				d.Headers[k] = v
			}
		}
	}
	return d
}
