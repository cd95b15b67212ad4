package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/nearest"
)

// decodeError turns an error of the TOML decoder into one that names the
// TOML key (and the queue or token it belongs to), what the key wants,
// what the file gives and the line, instead of the Go struct field:
//
//	queue "orders.created": retry_attempts: want an integer, got the string "3" (line 7)
func decodeError(data []byte, err error) error {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		msgs := make([]string, 0, len(sm.Errors))
		for i := range sm.Errors {
			msgs = append(msgs, unknownField(data, &sm.Errors[i]))
		}
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(msgs, "\n"))
	}
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	row, col := de.Position()
	key := de.Key()
	if len(key) == 0 {
		// A syntax error: no key to name, the position says where.
		return fmt.Errorf("%w: line %d, column %d: %s", ErrInvalidConfig, row, col, strings.TrimPrefix(de.Error(), "toml: "))
	}
	key = withStructField(key, de.Error())
	row = keyLine(data, key[len(key)-1], row)
	field, typ, ok := lookupKey(key)
	if !ok {
		return fmt.Errorf("%w: %s%s: %s (line %d)", ErrInvalidConfig, owner(data, key, row), strings.Join(key, "."), strings.TrimPrefix(de.Error(), "toml: "), row)
	}
	return fmt.Errorf("%w: %s%s: want %s, got %s (line %d)", ErrInvalidConfig, owner(data, key, row), field, want(typ), got(data, key, row, de.Error()), row)
}

// structField finds the Go field a decoder message names ("struct field
// lily.QueueConfig.DeliveryLimit of type int").
var structField = regexp.MustCompile(`struct field (?:[\w.]*\.)?(\w+)\.(\w+) of type`)

// withStructField completes key with the TOML key of the struct field the
// decoder's message names, when the key stops short of it (inside an
// inline table the decoder reports only the table's key).
func withStructField(key []string, msg string) []string {
	m := structField.FindStringSubmatch(msg)
	if m == nil {
		return key
	}
	for _, t := range []reflect.Type{reflect.TypeFor[Config](), reflect.TypeFor[lily.QueueConfig](), reflect.TypeFor[TokenConfig]()} {
		if t.Name() != m[1] {
			continue
		}
		if f, ok := t.FieldByName(m[2]); ok {
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag != "" && tag != key[len(key)-1] && (len(key) > 1 || t != reflect.TypeFor[Config]()) {
				return append(slices.Clone(key), tag)
			}
		}
	}
	return key
}

// keyLine returns row when that line of data assigns name, else the first
// line at or after row that does (else before it): the decoder reports
// line 1 for a value nested in an array.
func keyLine(data []byte, name string, row int) int {
	assign := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(name) + `"?\s*=`)
	lines := strings.Split(string(data), "\n")
	if row >= 1 && row <= len(lines) && strings.Contains(lines[row-1], name) {
		return row
	}
	first := 0
	for i, l := range lines {
		if !assign.MatchString(l) {
			continue
		}
		if i+1 >= row {
			return i + 1
		}
		if first == 0 {
			first = i + 1
		}
	}
	if first != 0 {
		return first
	}
	return row
}

// unknownField describes one unknown key, with the closest known key of
// its table as the likely fix.
func unknownField(data []byte, e *toml.DecodeError) string {
	row, _ := e.Position()
	key := e.Key()
	if len(key) == 0 {
		return fmt.Sprintf("unknown field (line %d)", row)
	}
	name := key[len(key)-1]
	msg := fmt.Sprintf("%s%s: unknown field (line %d)", owner(data, key, row), name, row)
	parent := reflect.TypeFor[Config]()
	if len(key) > 1 {
		if _, t, ok := lookupKey(key[:len(key)-1]); ok {
			parent = t
		}
	}
	if s := closest(name, tomlKeys(parent)); s != "" {
		msg += fmt.Sprintf(": did you mean %s?", s)
	} else if keys := tomlKeys(parent); len(keys) > 0 {
		msg += fmt.Sprintf(": the known keys are %s", strings.Join(keys, ", "))
	}
	return msg
}

// lookupKey follows a TOML key path through Config by the toml tags: the
// last key's display name and the Go type it decodes into (arrays of
// tables step into their element).
func lookupKey(key []string) (string, reflect.Type, bool) {
	t := reflect.TypeFor[Config]()
	for i, k := range key {
		for t.Kind() == reflect.Pointer || (t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct) {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByTag(t, k)
			if !ok {
				return "", nil, false
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return "", nil, false
		}
		if i == len(key)-1 {
			return k, t, true
		}
	}
	return "", nil, false
}

// fieldByTag returns the field of struct t whose toml tag is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("toml"), ","); tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// tomlKeys returns the toml keys of struct t (after pointers and slices).
func tomlKeys(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	sort.Strings(out)
	return out
}

// knownKeys returns every TOML key of the configuration file: the
// top-level ones and those of [[queue]] and [[token]], sorted.
func knownKeys() []string {
	seen := map[string]bool{}
	var out []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			if !seen[tag] {
				seen[tag] = true
				out = append(out, tag)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	sort.Strings(out)
	return out
}

// closest returns the candidate within edit distance 2 of name (the
// nearest; "" if none).
func closest(name string, candidates []string) string { return nearest.Name(name, candidates, 2) }

// want describes what a Go type accepts, in TOML terms.
func want(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int32:
		return fmt.Sprintf("an integer in %d..%d", math.MinInt32, math.MaxInt32)
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "an array of tables ([[...]] entries)"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(want(t.Elem()), "an "), "a ") + "s"
	case reflect.Map:
		return "a table of " + strings.TrimPrefix(strings.TrimPrefix(want(t.Elem()), "an "), "a ") + "s"
	case reflect.Struct:
		return "a table"
	}
	return t.String()
}

// tomlKind is the TOML type named by the decoder's message.
var tomlKind = regexp.MustCompile(`cannot decode TOML (\w+)`)

// got describes the value the file gives for key: from a generic decode of
// the document when it has one, else from the decoder's message.
func got(data []byte, key []string, row int, msg string) string {
	if v, ok := valueAt(data, key, row); ok {
		return describe(v)
	}
	if m := tomlKind.FindStringSubmatch(msg); m != nil {
		return article(m[1]) + " " + m[1]
	}
	if strings.Contains(msg, "too large") || strings.Contains(msg, "cannot be stored") || strings.Contains(msg, "overflow") {
		if raw := rawValue(data, key[len(key)-1], row); raw != "" {
			return "the integer " + raw + ", which is out of range"
		}
		return "an integer out of range (" + strings.TrimPrefix(msg, "toml: ") + ")"
	}
	return strings.TrimPrefix(msg, "toml: ")
}

// describe names a generically decoded TOML value: the string "3", the
// integer 3, an array holding the integer 1.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return "the integer " + strconv.FormatInt(v, 10)
	case float64:
		return "the number " + strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return "the boolean " + strconv.FormatBool(v)
	case []any:
		for _, e := range v {
			if _, ok := e.(string); !ok {
				return "an array holding " + describe(e)
			}
		}
		return "an array"
	case map[string]any:
		for k, e := range v {
			if _, ok := e.(string); !ok {
				return fmt.Sprintf("a table whose %s is %s", k, describe(e))
			}
		}
		return "a table"
	case time.Time, toml.LocalDate, toml.LocalTime, toml.LocalDateTime:
		return fmt.Sprintf("the date/time %v", v)
	}
	return fmt.Sprintf("%v", v)
}

// article is "an" before a vowel, else "a".
func article(w string) string {
	if w != "" && strings.ContainsRune("aeiou", rune(w[0])) {
		return "an"
	}
	return "a"
}

// generic decodes data without a schema; nil if it does not decode.
func generic(data []byte) map[string]any {
	var m map[string]any
	if toml.Unmarshal(data, &m) != nil {
		return nil
	}
	return m
}

// valueAt returns the value of key in data; for a key of an array of
// tables ([[queue]]), in the entry that the line row belongs to.
func valueAt(data []byte, key []string, row int) (any, bool) {
	var cur any = generic(data)
	if cur == nil {
		return nil, false
	}
	for i, k := range key {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
		if arr, ok := cur.([]any); ok && i < len(key)-1 {
			n := entryIndex(data, k, row)
			if n < 0 || n >= len(arr) {
				return nil, false
			}
			cur = arr[n]
		}
	}
	return cur, true
}

// entryIndex is the index of the [[table]] entry that line row is in: the
// count of [[table]] headers above it, minus one (-1 if none).
func entryIndex(data []byte, table string, row int) int {
	header := regexp.MustCompile(`^\s*\[\[\s*` + regexp.QuoteMeta(table) + `\s*\]\]`)
	n := -1
	for i, line := range strings.Split(string(data), "\n") {
		if i+1 > row {
			break
		}
		if header.MatchString(line) {
			n++
		}
	}
	return n
}

// rawValue returns the text after "name =" on line row of data ("" if the
// line does not assign name).
func rawValue(data []byte, name string, row int) string {
	lines := strings.Split(string(data), "\n")
	if row < 1 || row > len(lines) {
		return ""
	}
	k, v, ok := strings.Cut(lines[row-1], "=")
	if !ok || strings.Trim(strings.TrimSpace(k), `"'`) != name {
		return ""
	}
	v, _, _ = strings.Cut(v, "#")
	return strings.TrimSpace(v)
}

// entryName finds the name = "..." line of the [[table]] entry that line
// row is in, for documents that do not decode even generically.
func entryName(data []byte, table string, row int) string {
	header := regexp.MustCompile(`^\s*\[\[\s*` + regexp.QuoteMeta(table) + `\s*\]\]`)
	nameLine := regexp.MustCompile(`^\s*name\s*=\s*["']([^"']*)["']`)
	lines := strings.Split(string(data), "\n")
	start := -1
	for i := 0; i < len(lines) && i < row; i++ {
		if header.MatchString(lines[i]) {
			start = i
		}
	}
	if start < 0 {
		return ""
	}
	for _, l := range lines[start+1:] {
		if header.MatchString(l) || strings.HasPrefix(strings.TrimSpace(l), "[") {
			break
		}
		if m := nameLine.FindStringSubmatch(l); m != nil {
			return m[1]
		}
	}
	return ""
}

// owner names the [[queue]] or [[token]] entry a key belongs to, as a
// prefix: `queue "orders.created": `, or "" for a top-level key.
func owner(data []byte, key []string, row int) string {
	if len(key) < 2 || (key[0] != "queue" && key[0] != "token") {
		return ""
	}
	n := entryIndex(data, key[0], row)
	name := ""
	if m := generic(data); m != nil && n >= 0 {
		if arr, ok := m[key[0]].([]any); ok && n < len(arr) {
			if e, ok := arr[n].(map[string]any); ok {
				name, _ = e["name"].(string)
			}
		}
	} else if n >= 0 {
		name = entryName(data, key[0], row)
	}
	switch {
	case key[0] == "queue" && name != "":
		return fmt.Sprintf("queue %q: ", name)
	case key[0] == "token" && name != "":
		return fmt.Sprintf("token %d (%q): ", n+1, name)
	case n >= 0:
		return fmt.Sprintf("%s %d: ", key[0], n+1)
	}
	return key[0] + ": "
}
