package sqs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// PackAttribute is the one message attribute that carries everything Lily
// adds to a message (see the package documentation).
const PackAttribute = "x-lily"

// pack is the JSON of PackAttribute.
type pack struct {
	// V is the format version (1).
	V int `json:"v"`
	// H are Lily's headers and the headers SQS cannot carry as attributes,
	// typed (transport.MarshalHeaders).
	H json.RawMessage `json:"h,omitempty"`
	// T are the types of attributes: a Lily integer type ("int32") or a
	// foreign data type to send again as is ("=Number").
	T map[string]string `json:"t,omitempty"`
	// A are producer attributes carried here because all 10 attribute
	// slots were taken.
	A map[string]packedAttr `json:"a,omitempty"`
	// B is the body's encoding: "" (as is) or "base64".
	B string `json:"b,omitempty"`
}

type packedAttr struct {
	D string  `json:"d"`
	S *string `json:"s,omitempty"`
	B []byte  `json:"b,omitempty"`
}

// isLilyHeader reports whether a header is one Lily writes (packed).
func isLilyHeader(name string) bool {
	return strings.HasPrefix(name, "x-lily-") || name == evidence.HeaderRetryCount
}

// attrName is what SQS accepts as a message attribute name.
var attrName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}[A-Za-z0-9_-]$|^[A-Za-z0-9_-]$`)

func validAttrName(n string) bool {
	l := strings.ToLower(n)
	return attrName.MatchString(n) && !strings.Contains(n, "..") && !strings.HasPrefix(l, "aws.") && !strings.HasPrefix(l, "amazon.") && n != PackAttribute
}

// validBody reports whether SQS can carry s as a message body: XML
// characters only (#x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF).
func validBody(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// wireMessage is a message as SQS carries it.
type wireMessage struct {
	Body  string
	Attrs map[string]types.MessageAttributeValue
}

// encode builds the wire form of a message. foreignTypes are the data
// types of the attributes of a received message (receipt), so that its
// copies send them as they came.
func encode(eventID, key, typ string, body []byte, h transport.Headers, foreignTypes map[string]string) (wireMessage, error) {
	p := pack{V: 1, T: map[string]string{}}
	packed := transport.Headers{}
	attrs := map[string]types.MessageAttributeValue{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		v := h[k]
		if k == evidence.HeaderEventID || k == evidence.HeaderKey || k == evidence.HeaderType {
			continue
		}
		if isLilyHeader(k) || !validAttrName(k) {
			packed[k] = v
			continue
		}
		if dt, ok := foreignTypes[k]; ok {
			if a, ok := foreignAttr(dt, v); ok {
				attrs[k] = a
				if dt != "String" && dt != "Binary" {
					p.T[k] = "=" + dt
				}
				continue
			}
		}
		a, tag, ok := attrOf(v)
		if !ok {
			packed[k] = v
			continue
		}
		attrs[k] = a
		if tag != "" {
			p.T[k] = tag
		}
	}
	if eventID != "" {
		packed[evidence.HeaderEventID] = eventID
	}
	if key != "" {
		packed[evidence.HeaderKey] = key
	}
	if typ != "" {
		packed[evidence.HeaderType] = typ
	}
	hj, err := transport.MarshalHeaders(packed)
	if err != nil {
		return wireMessage{}, err
	}
	p.H = hj
	w := wireMessage{Body: string(body)}
	if !validBody(body) {
		w.Body, p.B = base64.StdEncoding.EncodeToString(body), "base64"
	}
	if len(attrs)+1 > MaxAttributes {
		// Every slot taken by the producer: carry its attributes in the
		// pack, exactly, and restore them on receive.
		p.A = map[string]packedAttr{}
		for k, a := range attrs {
			p.A[k] = packedAttr{D: aws.ToString(a.DataType), S: a.StringValue, B: a.BinaryValue}
		}
		attrs = map[string]types.MessageAttributeValue{}
	}
	if len(p.T) == 0 {
		p.T = nil
	}
	pj, err := json.Marshal(p)
	if err != nil {
		return wireMessage{}, err
	}
	attrs[PackAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(pj))}
	w.Attrs = attrs
	return w, nil
}

// attrOf is the attribute of a Lily header value SQS can carry typed:
// non-empty strings and bytes, integers (typed by a tag in the pack).
func attrOf(v any) (types.MessageAttributeValue, string, bool) {
	num := func(s, tag string) (types.MessageAttributeValue, string, bool) {
		return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(s)}, tag, true
	}
	switch x := v.(type) {
	case string:
		if x == "" || !validBody([]byte(x)) {
			return types.MessageAttributeValue{}, "", false
		}
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(x)}, "", true
	case []byte:
		if len(x) == 0 {
			return types.MessageAttributeValue{}, "", false
		}
		return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: x}, "", true
	case int8:
		return num(strconv.FormatInt(int64(x), 10), "int8")
	case int16:
		return num(strconv.FormatInt(int64(x), 10), "int16")
	case int32:
		return num(strconv.FormatInt(int64(x), 10), "int32")
	case int64:
		return num(strconv.FormatInt(x, 10), "int64")
	case int:
		return num(strconv.FormatInt(int64(x), 10), "int64")
	case uint8:
		return num(strconv.FormatUint(uint64(x), 10), "uint8")
	case uint16:
		return num(strconv.FormatUint(uint64(x), 10), "uint16")
	case uint32:
		return num(strconv.FormatUint(uint64(x), 10), "uint32")
	case uint64:
		return num(strconv.FormatUint(x, 10), "uint64")
	}
	return types.MessageAttributeValue{}, "", false
}

// foreignAttr is the attribute of a value received with data type dt.
func foreignAttr(dt string, v any) (types.MessageAttributeValue, bool) {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(dt, "Binary") || x == "" {
			return types.MessageAttributeValue{}, false
		}
		return types.MessageAttributeValue{DataType: aws.String(dt), StringValue: aws.String(x)}, true
	case []byte:
		if !strings.HasPrefix(dt, "Binary") || len(x) == 0 {
			return types.MessageAttributeValue{}, false
		}
		return types.MessageAttributeValue{DataType: aws.String(dt), BinaryValue: x}, true
	}
	return types.MessageAttributeValue{}, false
}

// decoded is a received message's Lily view.
type decoded struct {
	EventID, Key, Type string
	Body               []byte
	Headers            transport.Headers
	// Types are the data types of foreign attributes (sent again as is).
	Types map[string]string
	// Packed reports whether the message carried Lily's pack.
	Packed bool
}

// decode reads a received message. A malformed pack is an error (the
// caller dead-letters nothing silently: it keeps the raw attribute).
func decode(m types.Message) (decoded, error) {
	d := decoded{Headers: transport.Headers{}, Types: map[string]string{}}
	var p pack
	if a, ok := m.MessageAttributes[PackAttribute]; ok {
		if err := json.Unmarshal([]byte(aws.ToString(a.StringValue)), &p); err != nil {
			return d, fmt.Errorf("attribute %s: %w", PackAttribute, err)
		}
		d.Packed = true
	}
	put := func(name, dt string, s *string, b []byte) {
		tag := p.T[name]
		switch {
		case strings.HasPrefix(tag, "="):
			dt = tag[1:]
		case tag != "":
			if v, ok := parseInt(tag, aws.ToString(s)); ok {
				d.Headers[name] = v
				return
			}
		}
		if strings.HasPrefix(dt, "Binary") {
			d.Headers[name] = b
		} else {
			d.Headers[name] = aws.ToString(s)
		}
		if dt != "String" && dt != "Binary" {
			d.Types[name] = dt
		}
	}
	for name, a := range m.MessageAttributes {
		if name == PackAttribute {
			continue
		}
		put(name, aws.ToString(a.DataType), a.StringValue, a.BinaryValue)
	}
	for name, a := range p.A {
		put(name, a.D, a.S, a.B)
	}
	if len(p.H) > 0 {
		h, err := transport.UnmarshalHeaders(p.H)
		if err != nil {
			return d, fmt.Errorf("attribute %s: %w", PackAttribute, err)
		}
		maps.Copy(d.Headers, h)
	}
	str := func(k string) string {
		s, _ := d.Headers[k].(string)
		delete(d.Headers, k)
		return s
	}
	d.EventID, d.Key, d.Type = str(evidence.HeaderEventID), str(evidence.HeaderKey), str(evidence.HeaderType)
	body := aws.ToString(m.Body)
	if p.B == "base64" {
		b, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return d, fmt.Errorf("base64 body: %w", err)
		}
		d.Body = b
	} else {
		d.Body = []byte(body)
	}
	return d, nil
}

func parseInt(tag, s string) (any, bool) {
	bits := map[string]int{"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}[tag]
	if bits == 0 {
		return nil, false
	}
	if strings.HasPrefix(tag, "u") {
		u, err := strconv.ParseUint(s, 10, bits)
		if err != nil {
			return nil, false
		}
		switch bits {
		case 8:
			return uint8(u), true
		case 16:
			return uint16(u), true
		case 32:
			return uint32(u), true
		}
		return u, true
	}
	i, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return nil, false
	}
	switch bits {
	case 8:
		return int8(i), true
	case 16:
		return int16(i), true
	case 32:
		return int32(i), true
	}
	return i, true
}

// sysInt reads an integer system attribute.
func sysInt(m types.Message, name string) int {
	n, _ := strconv.Atoi(m.Attributes[name])
	return n
}

// sysTime reads a millisecond timestamp system attribute.
func sysTime(m types.Message, name string) time.Time {
	ms, err := strconv.ParseInt(m.Attributes[name], 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
