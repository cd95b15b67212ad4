package catalog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
)

// MaxIndexedBody is the most bytes of a body the search index reads; the
// rest of a longer body is not searchable.
const MaxIndexedBody = catalogdb.MaxIndexedBody

// SetIndexRedactor sets the redactor that bodies and error messages pass
// through before they are written to the search index, in this process:
// the default rules plus the configuration's redact_patterns
// (evidence.NewRedactor(cfg.RedactPatterns...)). Nil restores the
// default rules. Entries indexed before keep the text they were indexed
// with.
func SetIndexRedactor(r *evidence.Redactor) { catalogdb.SetIndexRedactor(r) }

// ErrEmptySearch is returned for a search text without a letter or digit.
var ErrEmptySearch = errors.New("catalog: search: nothing to search for")

// MaxSearchTokens is the most words (tokens, counting each word of a
// phrase) a search may hold: PostgreSQL refuses a tsquery of some
// thousands of terms with a raw "stack depth limit exceeded", and a
// search of more words than a snippet shows finds nothing useful.
const MaxSearchTokens = 64

// ErrSearchTooLong is returned, before any SQL, for a search text of more
// than MaxSearchTokens words.
var ErrSearchTooLong = errors.New("catalog: search: too many words")

// searchTerm is one term of a query: tokens that must appear in this
// order (one token for a plain word), the last one a prefix when prefix.
type searchTerm struct {
	tokens []string
	prefix bool
}

// parseSearch reads a search text: words, all of which must appear (in
// the error message or the redacted body); "a quoted phrase" whose words
// must appear in that order; a word ending in * matches as a prefix. A
// word with punctuation (orders.created, 10.0.0.1) is the phrase of its
// parts.
func parseSearch(q string) ([]searchTerm, error) {
	var terms []searchTerm
	add := func(s string, prefix bool) {
		if t := catalogdb.SearchTokens(s); len(t) > 0 {
			terms = append(terms, searchTerm{tokens: t, prefix: prefix})
		}
	}
	for q = strings.TrimSpace(q); q != ""; q = strings.TrimSpace(q) {
		var w string
		if q[0] == '"' {
			end := strings.IndexByte(q[1:], '"')
			if end < 0 {
				w, q = q[1:], ""
			} else {
				w, q = q[1:1+end], q[2+end:]
			}
			prefix := strings.HasPrefix(q, "*")
			q = strings.TrimPrefix(q, "*")
			add(w, prefix)
			continue
		}
		end := strings.IndexAny(q, " \t\n\r")
		if end < 0 {
			end = len(q)
		}
		w, q = q[:end], q[end:]
		add(strings.TrimSuffix(w, "*"), strings.HasSuffix(w, "*"))
	}
	n := 0
	for _, t := range terms {
		n += len(t.tokens)
	}
	if n > MaxSearchTokens {
		return nil, fmt.Errorf("%w: %d words; a search holds at most %d (catalog.MaxSearchTokens): search for the few rarest words, or narrow with the filters", ErrSearchTooLong, n, MaxSearchTokens)
	}
	if len(terms) == 0 {
		return nil, fmt.Errorf("%w: the text holds no letter or digit (search finds words of error messages and bodies)", ErrEmptySearch)
	}
	return terms, nil
}

// match is the query in the store's syntax: an FTS5 MATCH expression on
// SQLite, a to_tsquery('simple', …) argument on PostgreSQL. Tokens are
// letters and digits only, so quoting them is safe.
func matchQuery(d catalogdb.Dialect, terms []searchTerm) string {
	parts := make([]string, len(terms))
	for i, t := range terms {
		if d == catalogdb.Postgres {
			toks := make([]string, len(t.tokens))
			for j, tok := range t.tokens {
				toks[j] = "'" + tok + "'"
			}
			if t.prefix {
				toks[len(toks)-1] += ":*"
			}
			parts[i] = "(" + strings.Join(toks, " <-> ") + ")"
			continue
		}
		parts[i] = `"` + strings.Join(t.tokens, " ") + `"`
		if t.prefix {
			parts[i] += "*"
		}
	}
	if d == catalogdb.Postgres {
		return strings.Join(parts, " & ")
	}
	return strings.Join(parts, " AND ")
}
