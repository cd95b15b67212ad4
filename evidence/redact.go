package evidence

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// Limits of the error text written as evidence (docs/design.md §7).
const (
	// MaxErrorMessageBytes bounds x-lily-error-message.
	MaxErrorMessageBytes = 1024
	// MaxErrorStackBytes bounds x-lily-error-stack.
	MaxErrorStackBytes = 4096
)

// TruncatedSuffix marks text cut by Truncate. It counts within the limit.
const TruncatedSuffix = "…[truncated]"

// Truncate returns s unchanged when it is at most max bytes long. Otherwise it cuts s on a
// UTF-8 boundary and appends TruncatedSuffix so that the result is at most max bytes; when
// max is smaller than the suffix, s is cut without it. Truncate never splits a rune of a
// valid UTF-8 string. max ≤ 0 returns "".
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	if max <= 0 {
		return ""
	}
	if max < len(TruncatedSuffix) {
		return s[:runeCut(s, max)]
	}
	return s[:runeCut(s, max-len(TruncatedSuffix))] + TruncatedSuffix
}

// runeCut returns the largest i ≤ n (n < len(s)) at which s can be cut without splitting
// a rune. For invalid UTF-8 it may return n itself.
func runeCut(s string, n int) int {
	i := n
	for k := 0; k < utf8.UTFMax-1 && i > 0 && !utf8.RuneStart(s[i]); k++ {
		i--
	}
	if !utf8.RuneStart(s[i]) {
		return n
	}
	return i
}

// ErrInvalidPattern is wrapped by the error NewRedactor returns for a bad pattern.
var ErrInvalidPattern = errors.New("invalid redaction pattern")

// Redactor masks secrets in error text before it is written as evidence (docs/design.md §7).
//
// The default rules, always on, are:
//
//   - credentials in URLs: amqp://user:pass@host → amqp://user:***@host;
//   - bearer tokens: "Bearer abc.def" → "Bearer ***";
//   - secret pairs, case-insensitive, with = or :, quoted or not, the key possibly
//     prefixed (db_password, client_secret, access_token, X-Api-Key...): password,
//     passwd, secret, secret_key, token, api_key/apikey/api-key, access_key,
//     private_key → the value becomes *** (quotes kept);
//   - card-like numbers: 13 to 19 digits, optionally grouped by single spaces or
//     dashes, that pass the Luhn check → "****" and the last 4 digits. Long numbers that
//     fail Luhn (order IDs, most timestamps) are left alone.
//
// Extra patterns (from configuration) run after the defaults: a match is replaced by
// "***" or, when the pattern has a capturing group, only the first group's text is.
//
// A Redactor is safe for concurrent use. A nil *Redactor behaves as NewRedactor().
type Redactor struct {
	rules []rule
}

type rule struct {
	re *regexp.Regexp
	// repl returns the replacement of one match; m holds submatch indexes into s.
	repl func(s string, m []int) string
	// may, when set, is a cheap test that returns false only when re cannot match: it
	// is given an ASCII s lower-cased and is used only for ASCII text (for which the
	// (?i) rules fold exactly the ASCII letters). Nil means: always run re.
	may func(lower string) bool
}

var (
	urlCredRe = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)([^\s:/?#@]*):([^\s/?#]+)@`)
	bearerRe  = regexp.MustCompile(`(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*`)
	pairRe    = regexp.MustCompile(`(?i)([\w.\-]*?(?:password|passwd|secret|secret[_\-]?key|token|api[_\-]?key|access[_\-]?key|private[_\-]?key)["']?\s*[:=]\s*)(?:"([^"]*)"|'([^']*)'|([^\s,;&"'<>(){}\[\]]+))`)
	cardRe    = regexp.MustCompile(`\b\d(?:[ \-]?\d){12,18}\b`)
)

func defaultRules() []rule {
	return []rule{
		{urlCredRe, func(s string, m []int) string {
			return s[m[2]:m[3]] + s[m[4]:m[5]] + ":***@"
		}, func(l string) bool {
			return strings.Contains(l, "://") && strings.IndexByte(l, '@') >= 0
		}},
		{bearerRe, func(s string, m []int) string {
			return s[m[2]:m[3]] + " ***"
		}, func(l string) bool {
			return strings.Contains(l, "bearer")
		}},
		{pairRe, func(s string, m []int) string {
			key := s[m[2]:m[3]]
			switch {
			case m[4] >= 0:
				return key + `"***"`
			case m[6] >= 0:
				return key + `'***'`
			}
			return key + "***"
		}, func(l string) bool {
			// Every keyword of pairRe contains one of these, and a separator follows.
			return strings.ContainsAny(l, ":=") && (strings.Contains(l, "passw") ||
				strings.Contains(l, "secret") || strings.Contains(l, "token") || strings.Contains(l, "key"))
		}},
		{cardRe, func(s string, m []int) string {
			return maskCard(s[m[0]:m[1]])
		}, func(l string) bool {
			return countDigits(l, 13) >= 13
		}},
	}
}

// countDigits counts the ASCII digits of s, stopping at limit.
func countDigits(s string, limit int) int {
	n := 0
	for i := 0; i < len(s) && n < limit; i++ {
		if s[i] >= '0' && s[i] <= '9' {
			n++
		}
	}
	return n
}

// asciiLower returns s with ASCII letters lower-cased and true, or "" and false when s
// is not all ASCII. It allocates only when s has an upper-case letter.
func asciiLower(s string) (string, bool) {
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return "", false
		}
		upper = upper || ('A' <= c && c <= 'Z')
	}
	if !upper {
		return s, true
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b), true
}

// NewRedactor returns a Redactor with the default rules and the extra patterns (Go
// regexp syntax). An empty or invalid pattern is an error naming it and wrapping
// ErrInvalidPattern.
func NewRedactor(extra ...string) (*Redactor, error) {
	r := &Redactor{rules: defaultRules()}
	for _, p := range extra {
		if p == "" {
			return nil, fmt.Errorf("redaction pattern %q: empty pattern matches everything: %w", p, ErrInvalidPattern)
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("redaction pattern %q: %v: %w", p, err, ErrInvalidPattern)
		}
		r.rules = append(r.rules, rule{re: re, repl: extraRepl})
	}
	return r, nil
}

func extraRepl(s string, m []int) string {
	if len(m) >= 4 && m[2] >= 0 {
		return s[m[0]:m[2]] + "***" + s[m[3]:m[1]]
	}
	return "***"
}

var defaultRedactor = sync.OnceValue(func() *Redactor {
	return &Redactor{rules: defaultRules()}
})

// Redact returns s with every secret the rules find masked.
func (r *Redactor) Redact(s string) string {
	return r.redact(s, true)
}

// redact applies the rules in order. With precheck, a rule whose cheap test says it
// cannot match ASCII text is skipped; the result is the same (redact_test.go checks
// it against precheck = false), only the regular expressions that cannot match are not
// run — most error messages hold no secret at all.
func (r *Redactor) redact(s string, precheck bool) string {
	if r == nil {
		r = defaultRedactor()
	}
	if s == "" {
		return s // no rule masks anything in empty text (empty matches are skipped)
	}
	lower, ascii := "", false
	if precheck {
		lower, ascii = asciiLower(s)
	}
	for _, ru := range r.rules {
		if ascii && ru.may != nil && !ru.may(lower) {
			continue
		}
		t := ru.apply(s)
		if ascii && t != s {
			lower, ascii = asciiLower(t)
		}
		s = t
	}
	return s
}

func (ru rule) apply(s string) string {
	idx := ru.re.FindAllStringSubmatchIndex(s, -1)
	if idx == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, m := range idx {
		if m[0] == m[1] {
			continue // an empty match has nothing to mask
		}
		b.WriteString(s[last:m[0]])
		b.WriteString(ru.repl(s, m))
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// Scrub prepares rec for Apply: it redacts ErrorMessage and ErrorStack, then truncates
// them to MaxErrorMessageBytes and MaxErrorStackBytes (redaction first, so that a cut
// never hides half a secret from the rules). A nil rec is ignored.
func (r *Redactor) Scrub(rec *Record) {
	if rec == nil {
		return
	}
	rec.ErrorMessage = Truncate(r.Redact(rec.ErrorMessage), MaxErrorMessageBytes)
	rec.ErrorStack = Truncate(r.Redact(rec.ErrorStack), MaxErrorStackBytes)
}

// maskCard masks the Luhn-valid card number in a candidate run of digit groups (digits
// separated by single spaces or dashes), keeping its last 4 digits. It prefers the whole
// run, then the longest sub-run of whole groups with 13..19 digits; a run with no valid
// number is returned unchanged.
func maskCard(run string) string {
	type group struct{ start, end int }
	var groups []group
	for i := 0; i < len(run); {
		j := i
		for j < len(run) && run[j] >= '0' && run[j] <= '9' {
			j++
		}
		groups = append(groups, group{i, j})
		i = j + 1 // skip one separator
	}
	digits := func(a, b int) string { // digits of groups a..b-1
		var sb strings.Builder
		for _, g := range groups[a:b] {
			sb.WriteString(run[g.start:g.end])
		}
		return sb.String()
	}
	type span struct{ a, b, n int }
	var spans []span
	for a := range groups {
		n := 0
		for b := a + 1; b <= len(groups); b++ {
			n += groups[b-1].end - groups[b-1].start
			if n >= 13 && n <= 19 {
				spans = append(spans, span{a, b, n})
			}
		}
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].n > spans[j].n })
	for _, sp := range spans {
		d := digits(sp.a, sp.b)
		if luhn(d) {
			start, end := groups[sp.a].start, groups[sp.b-1].end
			return run[:start] + "****" + d[len(d)-4:] + run[end:]
		}
	}
	return run
}

// luhn reports whether the decimal digits d pass the Luhn check. All zeros do not.
func luhn(d string) bool {
	sum, nonzero := 0, false
	double := false
	for i := len(d) - 1; i >= 0; i-- {
		x := int(d[i] - '0')
		if x != 0 {
			nonzero = true
		}
		if double {
			x *= 2
			if x > 9 {
				x -= 9
			}
		}
		sum += x
		double = !double
	}
	return nonzero && sum%10 == 0
}
