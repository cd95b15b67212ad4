package catalog

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// SearchParams are the arguments of Store.Search.
type SearchParams struct {
	// Text is the query (parseSearch): words that must all appear in the
	// error message or the redacted body, "quoted phrases", prefix*.
	Text string
	// Filter narrows the entries as for list (queue, states, --where...).
	Filter Filter
	// Limit is the most hits returned. Defaults to 50.
	Limit int
}

// SnippetPart is a piece of a hit's snippet; Match marks the pieces that
// matched a query word.
type SnippetPart struct {
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}

// SearchHit is one entry found by Search with a snippet of its indexed
// (redacted) text around the first match.
type SearchHit struct {
	Entry   *Entry
	Snippet []SnippetPart
}

// Search streams the entries whose indexed text matches p.Text and that
// match p.Filter, in ID order (page on with Filter.AfterID), at most
// p.Limit, to fn. The index is read first (FTS5 on SQLite, a GIN index on
// PostgreSQL), so a search over a large catalog reads only the matches.
func (s *Store) Search(ctx context.Context, p SearchParams, fn func(*SearchHit) error) error {
	terms, err := parseSearch(p.Text)
	if err != nil {
		return err
	}
	if p.Limit <= 0 {
		p.Limit = 50
	}
	where, args := p.Filter.where()
	cond := strings.TrimPrefix(where, " WHERE ")
	if cond != "" {
		cond = " AND " + cond
	}
	d := s.db.Dialect()
	var q string
	if d == catalogdb.Postgres {
		order, err := s.pgSearchOrder(ctx, matchQuery(d, terms))
		if err != nil {
			return err
		}
		q = `SELECT ` + catalogdb.SelectCols + `, lily_dlq_search.text FROM lily_dlq_search JOIN lily_dlq_entries ON lily_dlq_entries.id = lily_dlq_search.entry_id
			WHERE lily_dlq_search.doc @@ to_tsquery('simple', ?)` + cond + ` ORDER BY ` + order + ` LIMIT ?`
	} else {
		q = `SELECT ` + catalogdb.SelectCols + `, lily_dlq_search.text FROM lily_dlq_search JOIN lily_dlq_entries ON lily_dlq_entries.id = lily_dlq_search.rowid
			WHERE lily_dlq_search MATCH ?` + cond + ` ORDER BY lily_dlq_search.rowid LIMIT ?`
	}
	all := append([]any{matchQuery(d, terms)}, args...)
	all = append(all, p.Limit)
	rows, err := s.db.QueryContext(ctx, q, all...)
	if err != nil {
		return fmt.Errorf("catalog: search %q: %w", p.Text, err)
	}
	defer rows.Close()
	for rows.Next() {
		var text string
		e, err := catalogdb.ScanEntry(searchRow{rows, &text})
		if err != nil {
			return err
		}
		if err := fn(&SearchHit{Entry: e, Snippet: snippet(text, terms, 160)}); err != nil {
			return err
		}
	}
	return rows.Err()
}

// pgDenseMatches is the number of matches from which walking the index
// in ID order finds a page sooner than reading every match.
const pgDenseMatches = 10000

// pgSearchOrder chooses the plan of a PostgreSQL search by how many
// entries match, which the planner cannot estimate for a rare or unknown
// word (it then walks every entry in ID order looking for one: seconds
// over a million entries). A probe through the GIN index counts up to
// pgDenseMatches: fewer, and the matches are read from the GIN index and
// sorted ("entry_id + 0" takes the ID order's index away from the
// planner); more, and the ID order's index finds a page at once.
func (s *Store) pgSearchOrder(ctx context.Context, tsq string) (string, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM lily_dlq_search WHERE doc @@ to_tsquery('simple', ?) LIMIT ?) m`,
		tsq, pgDenseMatches).Scan(&n); err != nil {
		return "", fmt.Errorf("catalog: search: %w", err)
	}
	if n < pgDenseMatches {
		return "lily_dlq_search.entry_id + 0", nil
	}
	return "lily_dlq_search.entry_id", nil
}

// searchRow scans an entry followed by the indexed text.
type searchRow struct {
	r    catalogdb.Scanner
	text *string
}

func (r searchRow) Scan(dest ...any) error { return r.r.Scan(append(dest, r.text)...) }

// snippet cuts about width bytes of text around the first token of terms
// it finds, and marks every token of terms in that window. Matching is
// per token (letters and digits, case folded), as the index matches.
func snippet(text string, terms []searchTerm, width int) []SnippetPart {
	text = strings.Map(func(r rune) rune { // one line; same byte offsets
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, text)
	want := map[string]bool{}
	var prefixes []string
	for _, t := range terms {
		for i, tok := range t.tokens {
			if t.prefix && i == len(t.tokens)-1 {
				prefixes = append(prefixes, tok)
			} else {
				want[tok] = true
			}
		}
	}
	matches := func(tok string) bool {
		tok = strings.ToLower(tok)
		if want[tok] {
			return true
		}
		for _, p := range prefixes {
			if strings.HasPrefix(tok, p) {
				return true
			}
		}
		return false
	}
	// Token spans of text.
	type span struct{ start, end int }
	var toks []span
	start := -1
	for i, r := range text {
		word := unicode.IsLetter(r) || unicode.IsDigit(r)
		if word && start < 0 {
			start = i
		} else if !word && start >= 0 {
			toks = append(toks, span{start, i})
			start = -1
		}
	}
	if start >= 0 {
		toks = append(toks, span{start, len(text)})
	}
	first := -1
	for _, t := range toks {
		if matches(text[t.start:t.end]) {
			first = t.start
			break
		}
	}
	lo, hi := 0, len(text)
	if first >= 0 && len(text) > width {
		lo = max(0, first-width/3)
		hi = min(len(text), lo+width)
	} else if len(text) > width {
		hi = width
	}
	for lo > 0 && !utf8.RuneStart(text[lo]) {
		lo--
	}
	for hi < len(text) && !utf8.RuneStart(text[hi]) {
		hi++
	}
	var parts []SnippetPart
	add := func(s string, m bool) {
		if s == "" {
			return
		}
		if n := len(parts); n > 0 && parts[n-1].Match == m {
			parts[n-1].Text += s
			return
		}
		parts = append(parts, SnippetPart{Text: s, Match: m})
	}
	if lo > 0 {
		add("…", false)
	}
	pos := lo
	for _, t := range toks {
		if t.start < lo || t.end > hi {
			continue
		}
		if matches(text[t.start:t.end]) {
			add(text[pos:t.start], false)
			add(text[t.start:t.end], true)
			pos = t.end
		}
	}
	add(text[pos:hi], false)
	if hi < len(text) {
		add("…", false)
	}
	return parts
}
