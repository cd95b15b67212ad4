package catalogdb

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/lily-mq/lily/evidence"
)

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

// SearchTokens splits s into the index's tokens: runs of Unicode letters
// and digits, lower-cased.
func SearchTokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// Indexer writes index rows inside an insert transaction.
type Indexer struct {
	q Querier
}

// NewIndexer returns the indexer that writes through q.
func NewIndexer(q Querier) Indexer { return Indexer{q: q} }

// Index writes the index row of entry id (replacing one that is there).
func (x Indexer) Index(ctx context.Context, id int64, errorMessage string, body []byte) error {
	text, ok := searchText(errorMessage, body)
	if !ok {
		return nil
	}
	var err error
	if x.q.Dialect() == Postgres {
		_, err = x.q.ExecContext(ctx, `INSERT INTO lily_dlq_search(entry_id, text, doc) VALUES (?, ?, to_tsvector('simple', ?))
			ON CONFLICT (entry_id) DO UPDATE SET text = excluded.text, doc = excluded.doc`, id, text, strings.Join(SearchTokens(text), " "))
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

// BackfillSearch indexes the entries written before the search index
// existed (an older catalog), in batches of one transaction each, and
// records its progress so that an interrupted backfill resumes.
func BackfillSearch(ctx context.Context, h *DB) error {
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

func backfillBatch(ctx context.Context, h *DB, batch int) (bool, error) {
	tx, err := h.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var upto, next int64
	// The progress row is locked: two processes opening the catalog at
	// once index each batch once, one after the other.
	if err := tx.QueryRowContext(ctx, `SELECT upto, next FROM lily_search_backfill WHERE id = 1`+h.d.ForUpdate()).Scan(&upto, &next); err != nil {
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
	x := NewIndexer(tx)
	for _, r := range got {
		if err := x.Index(ctx, r.id, r.msg, r.body); err != nil {
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
