package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/lily-mq/lily/evidence"
)

// The search index (lily dlq search) holds, per entry, its error message
// and its body after the redactors: never the raw body, which stays in
// the entry. It is written in the transaction that inserts the entry and
// removed by a trigger in the transaction that removes the entry's data
// (discard, expire, erase) or the entry itself.
//
// SQLite: an FTS5 table whose rowid is the entry ID. PostgreSQL: a table
// with the text and a tsvector under a GIN index. Both are fed the same
// tokens — Unicode letters and digits, lower-cased — so a query finds the
// same entries on either store.
const searchSchema = `
CREATE VIRTUAL TABLE IF NOT EXISTS lily_dlq_search USING fts5(text, tokenize = 'unicode61 remove_diacritics 0');
CREATE TRIGGER IF NOT EXISTS lily_dlq_search_remove AFTER UPDATE OF body ON lily_dlq_entries WHEN NEW.body IS NULL
BEGIN DELETE FROM lily_dlq_search WHERE rowid = NEW.id; END;
CREATE TRIGGER IF NOT EXISTS lily_dlq_search_delete AFTER DELETE ON lily_dlq_entries
BEGIN DELETE FROM lily_dlq_search WHERE rowid = OLD.id; END;
CREATE TABLE IF NOT EXISTS lily_search_backfill (id INTEGER PRIMARY KEY, upto INTEGER NOT NULL, next INTEGER NOT NULL);
INSERT INTO lily_search_backfill(id, upto, next) SELECT 1, COALESCE(MAX(id), 0), 0 FROM lily_dlq_entries WHERE true ON CONFLICT DO NOTHING;
`

// pgSearchSchema is migration step 4 on PostgreSQL: the search index, its
// triggers, the backfill marker (entries up to upto, written before the
// index existed, are indexed by backfillSearch on open) and the JSON
// functions of Where.
const pgSearchSchema = `
CREATE TABLE lily_dlq_search (
	entry_id BIGINT PRIMARY KEY,
	text     TEXT     NOT NULL,
	doc      TSVECTOR NOT NULL
);
CREATE INDEX lily_dlq_search_doc ON lily_dlq_search USING GIN (doc);
CREATE OR REPLACE FUNCTION lily_dlq_search_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM lily_dlq_search WHERE entry_id = OLD.id;
	RETURN NULL;
END $$;
CREATE TRIGGER lily_dlq_search_remove AFTER UPDATE OF body ON lily_dlq_entries
	FOR EACH ROW WHEN (NEW.body IS NULL) EXECUTE FUNCTION lily_dlq_search_forget();
CREATE TRIGGER lily_dlq_search_delete AFTER DELETE ON lily_dlq_entries
	FOR EACH ROW EXECUTE FUNCTION lily_dlq_search_forget();
CREATE TABLE lily_search_backfill (id INTEGER PRIMARY KEY, upto BIGINT NOT NULL, next BIGINT NOT NULL);
INSERT INTO lily_search_backfill(id, upto, next) SELECT 1, COALESCE(MAX(id), 0), 0 FROM lily_dlq_entries;
` + pgWhereFuncs

// MaxIndexedBody is the most bytes of a body the search index reads; the
// rest of a longer body is not searchable.
const MaxIndexedBody = 64 << 10

var indexRedactor atomic.Pointer[evidence.Redactor]

// SetIndexRedactor sets the redactor that bodies and error messages pass
// through before they are written to the search index, in this process:
// the default rules plus the configuration's redact_patterns
// (evidence.NewRedactor(cfg.RedactPatterns...)). Nil restores the
// default rules. Entries indexed before keep the text they were indexed
// with.
func SetIndexRedactor(r *evidence.Redactor) { indexRedactor.Store(r) }

// searchText is what the index holds for an entry: its error message and,
// when the body is text (UTF-8 without NUL bytes), the body (its first MaxIndexedBody bytes),
// both redacted. ok is false when there is nothing to index.
func searchText(errorMessage string, body []byte) (string, bool) {
	r := indexRedactor.Load() // nil: the default rules
	var b strings.Builder
	if errorMessage != "" {
		b.WriteString(strings.ReplaceAll(r.Redact(errorMessage), "\x00", " ")) // PostgreSQL text holds no NUL
	}
	if len(body) > 0 {
		if len(body) > MaxIndexedBody {
			body = body[:MaxIndexedBody]
			for len(body) > 0 && !utf8.Valid(body) && len(body) > MaxIndexedBody-utf8.UTFMax {
				body = body[:len(body)-1] // a rune cut in half at the end
			}
		}
		if utf8.Valid(body) && bytes.IndexByte(body, 0) < 0 { // text, not binary
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(r.Redact(string(body)))
		}
	}
	return b.String(), b.Len() > 0
}

// searchTokens splits s into the index's tokens: runs of Unicode letters
// and digits, lower-cased.
func searchTokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// searchIndexer writes index rows inside an insert transaction.
type searchIndexer struct {
	d dialect
	q querier
}

// index writes the index row of entry id (replacing one that is there).
func (x searchIndexer) index(ctx context.Context, id int64, errorMessage string, body []byte) error {
	text, ok := searchText(errorMessage, body)
	if !ok {
		return nil
	}
	var err error
	if x.d == dialectPostgres {
		_, err = x.q.ExecContext(ctx, `INSERT INTO lily_dlq_search(entry_id, text, doc) VALUES (?, ?, to_tsvector('simple', ?))
			ON CONFLICT (entry_id) DO UPDATE SET text = excluded.text, doc = excluded.doc`, id, text, strings.Join(searchTokens(text), " "))
	} else {
		if _, err = x.q.ExecContext(ctx, `DELETE FROM lily_dlq_search WHERE rowid = ?`, id); err == nil {
			_, err = x.q.ExecContext(ctx, `INSERT INTO lily_dlq_search(rowid, text) VALUES (?, ?)`, id, text)
		}
	}
	if err != nil {
		return fmt.Errorf("catalog: index entry %d for search: %w", id, err)
	}
	return nil
}

// backfillSearch indexes the entries written before the search index
// existed (an older catalog), in batches of one transaction each, and
// records its progress so that an interrupted backfill resumes.
func backfillSearch(ctx context.Context, h *handle) error {
	const batch = 500
	for {
		done, err := backfillBatch(ctx, h, batch)
		if err != nil {
			return fmt.Errorf("catalog: index older entries for search: %w", err)
		}
		if done {
			return nil
		}
	}
}

func backfillBatch(ctx context.Context, h *handle, batch int) (bool, error) {
	tx, err := h.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var upto, next int64
	if err := tx.QueryRowContext(ctx, `SELECT upto, next FROM lily_search_backfill WHERE id = 1`).Scan(&upto, &next); err != nil {
		return false, err
	}
	if next >= upto {
		return true, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, error_message, body FROM lily_dlq_entries
		WHERE id > ? AND id <= ? AND body IS NOT NULL ORDER BY id LIMIT ?`, next, upto, batch)
	if err != nil {
		return false, err
	}
	type row struct {
		id   int64
		msg  string
		body []byte
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.msg, &r.body); err != nil {
			rows.Close()
			return false, err
		}
		got = append(got, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	x := searchIndexer{d: tx.d, q: tx}
	for _, r := range got {
		if err := x.index(ctx, r.id, r.msg, r.body); err != nil {
			return false, err
		}
	}
	next = upto
	if len(got) == batch {
		next = got[len(got)-1].id
	}
	if _, err := tx.ExecContext(ctx, `UPDATE lily_search_backfill SET next = ? WHERE id = 1`, next); err != nil {
		return false, err
	}
	return next >= upto, tx.Commit()
}

// ErrEmptySearch is returned for a search text without a letter or digit.
var ErrEmptySearch = errors.New("catalog: search: nothing to search for")

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
		if t := searchTokens(s); len(t) > 0 {
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
	if len(terms) == 0 {
		return nil, fmt.Errorf("%w: the text holds no letter or digit (search finds words of error messages and bodies)", ErrEmptySearch)
	}
	return terms, nil
}

// match is the query in the store's syntax: an FTS5 MATCH expression on
// SQLite, a to_tsquery('simple', …) argument on PostgreSQL. Tokens are
// letters and digits only, so quoting them is safe.
func matchQuery(d dialect, terms []searchTerm) string {
	parts := make([]string, len(terms))
	for i, t := range terms {
		if d == dialectPostgres {
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
	if d == dialectPostgres {
		return strings.Join(parts, " & ")
	}
	return strings.Join(parts, " AND ")
}
