package evidence

import "strconv"

// MaxSchemaVersion is the largest schema version (x-lily-schema-version): the int32 range.
const MaxSchemaVersion = 1<<31 - 1

// SchemaVersion returns the message schema version of h (x-lily-schema-version) and
// whether h carries a readable one. Lily's publisher writes it as int32 (SetSchemaVersion);
// other producers' forms are read too: any integer type, and decimal text as a string or
// []byte ("4", as Kafka clients and AMQP clients that only write strings send it). A
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
		p, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, false
		}
		n = p
	case []byte:
		p, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
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

// SetSchemaVersion writes n as x-lily-schema-version, as int32 (AMQP long-int). n should
// be in 1..MaxSchemaVersion; 0 removes the header (no version).
func SetSchemaVersion(h map[string]any, n int) {
	if n == 0 {
		delete(h, HeaderSchemaVersion)
		return
	}
	h[HeaderSchemaVersion] = saturate32(n)
}
