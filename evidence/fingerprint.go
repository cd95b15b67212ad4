package evidence

import (
	"regexp"
	"strings"
)

var (
	fpDoubleQuoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	fpSingleQuoted = regexp.MustCompile(`(^|[^\p{L}\p{N}_])'[^'\n]*'`)
	fpBackquoted   = regexp.MustCompile("`[^`]*`")
	fpUUID         = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	fpHex          = regexp.MustCompile(`(?i)\b(?:0x[0-9a-f]+|[0-9a-f]{8,})\b`)
	fpNumber       = regexp.MustCompile(`(^|[^\p{L}\p{N}_])\d+(?:[.,]\d+)*`)
)

// Fingerprint normalizes an error message so that messages differing only in their
// variable parts group together (lily group by fingerprint):
//
//   - quoted values ("...", '...', `...`) become <q>;
//   - UUIDs, 0x-prefixed hex numbers and hex IDs of 8 or more hex digits with at least one
//     digit and one letter (Mongo ObjectIDs, commit hashes) become <id>;
//   - numbers not glued to a preceding letter (12345, 3.14, 10.0.0.1, 500 in 500ms)
//     become <n>; identifiers such as http2 or v1 are kept;
//   - runs of white space collapse to one space, leading and trailing space is dropped.
//
// So "order 12345 not found" and "order 99 not found" share a fingerprint, and so do
// `invalid "abc"` and `invalid "xyz"`.
func Fingerprint(msg string) string {
	s := fpDoubleQuoted.ReplaceAllString(msg, "<q>")
	s = fpSingleQuoted.ReplaceAllString(s, "${1}<q>")
	s = fpBackquoted.ReplaceAllString(s, "<q>")
	s = fpUUID.ReplaceAllString(s, "<id>")
	s = fpHex.ReplaceAllStringFunc(s, func(m string) string {
		if len(m) > 2 && (m[1] == 'x' || m[1] == 'X') && m[0] == '0' {
			return "<id>"
		}
		var digit, letter bool
		for i := 0; i < len(m); i++ {
			if m[i] >= '0' && m[i] <= '9' {
				digit = true
			} else {
				letter = true
			}
		}
		if digit && letter {
			return "<id>"
		}
		return m // all digits: a number, handled below; all letters: a word
	})
	s = fpNumber.ReplaceAllString(s, "${1}<n>")
	return strings.Join(strings.Fields(s), " ")
}
