package evidence

import "strconv"

// MaxSchemaVersion is the largest schema version (x-lily-schema-version): the int32 range.
const MaxSchemaVersion = 1<<31 - 1

// SchemaVersion returns the message schema version of h (x-lily-schema-version) and
// whether h carries a readable one. Lily's publisher writes it as int32 (SetSchemaVersion);
// other producers' forms are read too: any integer type, and decimal text as a string or
// []byte ("4", as Kafka clients and AMQP clients that only write strings send it) — digits
// only, no sign or space. A
// version is in 1..MaxSchemaVersion; absent, 0, negative, out of range or unreadable
// values give (0, false): the message has no known schema version.
func SchemaVersion(h map[string]any) (int, bool) {
	v, ok := h[HeaderSchemaVersion]
	if !ok {
		return 0, false
	}
	var n int64
	switch x := v.(type) {
	case string:
		p, ok := digits(x)
		if !ok {
			return 0, false
		}
		n = p
	case []byte:
		p, ok := digits(string(x))
		if !ok {
			return 0, false
		}
		n = p
	case float32, float64, bool:
		return 0, false
	default:
		i, ok := intOf(v)
		if !ok {
			return 0, false
		}
		n = i
	}
	if n < 1 || n > MaxSchemaVersion {
		return 0, false
	}
	return int(n), true
}

// digits reads s when it is 1..10 ASCII digits and nothing else (no sign, no space).
func digits(s string) (int64, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// SetSchemaVersion writes n as x-lily-schema-version, as int32 (AMQP long-int). n should
// be in 1..MaxSchemaVersion; 0 removes the header (no version).
func SetSchemaVersion(h map[string]any, n int) {
	if n == 0 {
		delete(h, HeaderSchemaVersion)
		return
	}
	h[HeaderSchemaVersion] = saturate32(n)
}
