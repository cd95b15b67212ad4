package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// ActionEdit is the audit action of an edit: a new body version stored.
const ActionEdit = "edit"

// OutcomeEdited is the outcome of an edit that stored a version.
const OutcomeEdited = "edited"

// MaxEditBody is the largest edited body accepted (16 MiB).
const MaxEditBody = 16 << 20

// Content types a queue may declare (QueueConfig.ContentType) that an
// edit's body is checked against.
const (
	ContentJSON   = "application/json"
	ContentText   = "text/plain"
	ContentBinary = "application/octet-stream"
)

// ErrSameBody is wrapped when an edit's body equals the latest version.
var ErrSameBody = errors.New("catalog: the edited body is the same as the latest version")

// ErrNotEditable is wrapped when an entry cannot be edited: it left the
// work list, or its data was removed.
var ErrNotEditable = errors.New("catalog: entry cannot be edited")

// BodyVersion is one version of an entry's body: version 0 is the
// original, as dead-lettered.
type BodyVersion struct {
	Version int `json:"version"`
	// Body is nil once the data was removed (discard, expire, erase).
	Body       []byte    `json:"-"`
	BodySHA256 string    `json:"body_sha256"`
	BodySize   int64     `json:"body_size"`
	PrevSHA256 string    `json:"prev_sha256,omitempty"`
	EditedBy   string    `json:"edited_by,omitempty"`
	EditedAt   time.Time `json:"edited_at"`
	Reason     string    `json:"reason,omitempty"`
	Op         string    `json:"op,omitempty"`
	Erased     bool      `json:"erased"`
}

// EditParams are the arguments of Edit.
type EditParams struct {
	// ID is the catalog entry.
	ID int64
	// Body is the new body, stored as the next version.
	Body []byte
	// Reason is why the body was changed; required, kept with the version
	// and in the audit log.
	Reason string
	// ContentType is the content type the entry's queue declares ("" for
	// none): the new body must decode as it (CheckBody).
	ContentType string
	// Actor is who edits. Defaults to DefaultActor().
	Actor string
	// Op is the audit operation ID. Defaults to NewOp.
	Op string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// EditResult is what Edit stored.
type EditResult struct {
	Op      string   `json:"op"`
	Entry   EntryRef `json:"entry"`
	Version int      `json:"version"`
	// Previous is the version the edit replaced (its Body set).
	Previous BodyVersion `json:"previous"`
	// Current is the version stored (its Body set).
	Current BodyVersion `json:"current"`
}

// CheckBody reports whether body decodes as contentType: valid JSON for
// application/json (and any "+json" type), valid UTF-8 for text/*; any
// body for application/octet-stream or no content type.
func CheckBody(contentType string, body []byte) error {
	ct, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(contentType)), ";")
	ct = strings.TrimSpace(ct)
	switch {
	case ct == "" || ct == ContentBinary:
		return nil
	case ct == ContentJSON || strings.HasSuffix(ct, "+json"):
		if !json.Valid(body) {
			var v any
			err := json.Unmarshal(body, &v)
			return fmt.Errorf("the body is not valid JSON (the queue's content_type is %s): %v", ct, err)
		}
		if !utf8.Valid(body) { // json.Valid lets invalid UTF-8 in strings through; JSON text is UTF-8 (RFC 8259 §8.1)
			return fmt.Errorf("the body is not valid UTF-8, so not JSON (the queue's content_type is %s): byte %d starts an invalid sequence", ct, invalidUTF8At(body))
		}
	case strings.HasPrefix(ct, "text/"):
		if !utf8.Valid(body) {
			return fmt.Errorf("the body is not valid UTF-8 text (the queue's content_type is %s)", ct)
		}
	}
	return nil
}

// invalidUTF8At is the offset of b's first invalid UTF-8 sequence, -1
// when b is valid.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Edit stores a new version of the body of a pending or needs_manual
// entry: the original and every earlier version are kept, and the
// audit log records both hashes. A redrive sends the latest version (with
// evidence.HeaderEditedBy and evidence.HeaderEditedVersion). The body must
// differ from the latest version and decode as p.ContentType.
func (s *Store) Edit(ctx context.Context, p EditParams) (EditResult, error) {
	switch {
	case strings.TrimSpace(p.Reason) == "":
		return EditResult{}, errors.New("catalog: an edit needs a reason (it is kept with the version and in the audit log)")
	case len(p.Body) > MaxEditBody:
		return EditResult{}, fmt.Errorf("catalog: the edited body has %d bytes, more than the %d accepted", len(p.Body), MaxEditBody)
	}
	if err := CheckBody(p.ContentType, p.Body); err != nil {
		return EditResult{}, fmt.Errorf("catalog: edit of entry %d refused: %w; fix the body file", p.ID, err)
	}
	d := catalogdb.NewDecision(p.Op, p.Actor, "", p.Now)
	var res EditResult
	var msg trace.SpanContext // the edited message's trace, when tracing
	start := time.Now()
	// The entry's row is locked first: two edits of one entry number
	// their versions one after the other, and a decision on it waits.
	err := s.db.WithKeyed(ctx, nil, func(tx *catalogdb.Tx) error {
		row := tx.QueryRowContext(ctx, `SELECT `+catalogdb.SelectCols+` FROM lily_dlq_entries WHERE id = ?`+tx.Dialect().ForUpdate(), p.ID)
		e, err := catalogdb.ScanEntry(row)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: id %d", ErrNotFound, p.ID)
		}
		if err != nil {
			return err
		}
		msg = messageSpan(e.Headers) // not ctx: an entry without trace context links nowhere
		res.Entry = ref(e)
		if (e.State != StatePending && e.State != StateNeedsManual) || !e.ErasedAt.IsZero() {
			return fmt.Errorf("%w: entry %d is %s: only pending or needs_manual entries with their data can be edited (a parked entry is released as it is: unpark it first)", ErrNotEditable, e.ID, e.State)
		}
		vs, err := versionsOf(ctx, tx, e)
		if err != nil {
			return err
		}
		prev := vs[len(vs)-1]
		if bytes.Equal(prev.Body, p.Body) {
			return fmt.Errorf("%w: edit of entry %d refused: the body is the same as version %d (sha256 %s): nothing to store", ErrSameBody, e.ID, prev.Version, prev.BodySHA256)
		}
		now := d.Now()
		cur := BodyVersion{Version: prev.Version + 1, Body: p.Body, BodySHA256: sha256Hex(p.Body), BodySize: int64(len(p.Body)),
			PrevSHA256: prev.BodySHA256, EditedBy: d.Actor, EditedAt: now.UTC().Truncate(time.Millisecond), Reason: p.Reason, Op: d.Op}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_dlq_versions(entry_id, version, body, body_sha256, body_size, prev_sha256, edited_by, edited_at, reason, op)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, e.ID, cur.Version, cur.Body, cur.BodySHA256, cur.BodySize, cur.PrevSHA256,
			cur.EditedBy, now.UnixMilli(), cur.Reason, cur.Op); err != nil {
			return fmt.Errorf("catalog: store version %d of entry %d: %w", cur.Version, e.ID, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE lily_dlq_entries SET updated_at = ? WHERE id = ?`, now.UnixMilli(), e.ID); err != nil {
			return fmt.Errorf("catalog: edit entry %d: %w", e.ID, err)
		}
		sel, _ := json.Marshal(map[string]any{"id": e.ID, "queue": e.Queue, "version": cur.Version,
			"from_sha256": prev.BodySHA256, "to_sha256": cur.BodySHA256, "from_size": prev.BodySize, "to_size": cur.BodySize})
		d.Selector = string(sel)
		detail := fmt.Sprintf("version %d of entry %d: sha256 %s (%d bytes) -> %s (%d bytes): %s",
			cur.Version, e.ID, prev.BodySHA256, prev.BodySize, cur.BodySHA256, cur.BodySize, p.Reason)
		if err := catalogdb.AppendAudit(ctx, tx, d.Record(ActionEdit, OutcomeEdited, false, []string{e.EventID}, detail)); err != nil {
			return err
		}
		res = EditResult{Op: d.Op, Entry: ref(e), Version: cur.Version, Previous: prev, Current: cur}
		return nil
	})
	if s.tracer != nil && res.Entry.ID != 0 {
		ws := decisionSpans(d, ActionEdit, OutcomeEdited, false, []EntryRef{res.Entry}, map[int64]trace.SpanContext{res.Entry.ID: msg})
		if res.Version != 0 {
			ws[0].attrs = append(ws[0].attrs, attribute.Int("lily.edit.version", res.Version))
		}
		s.emitSpans(ctx, start, ws, err)
	}
	if err != nil {
		res.Entry = EntryRef{}
	}
	return res, err
}

// Versions returns every version of the entry's body, the original
// (version 0) first.
func (s *Store) Versions(ctx context.Context, id int64) ([]BodyVersion, error) {
	e, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return versionsOf(ctx, s.db, e)
}

// versionsOf returns e's versions, the original first.
func versionsOf(ctx context.Context, q catalogdb.Querier, e *Entry) ([]BodyVersion, error) {
	orig := BodyVersion{Version: 0, Body: e.Body, BodySHA256: e.BodySHA256, BodySize: e.BodySize, EditedAt: e.DeadLetteredAt, Erased: !e.ErasedAt.IsZero()}
	if orig.Body == nil && !orig.Erased {
		orig.Body = []byte{}
	}
	out := []BodyVersion{orig}
	rows, err := q.QueryContext(ctx, `SELECT version, body, body_sha256, body_size, prev_sha256, edited_by, edited_at, reason, op, erased_at
		FROM lily_dlq_versions WHERE entry_id = ? ORDER BY version`, e.ID)
	if err != nil {
		return nil, fmt.Errorf("catalog: versions of entry %d: %w", e.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var v BodyVersion
		var at int64
		var er sql.NullInt64
		if err := rows.Scan(&v.Version, &v.Body, &v.BodySHA256, &v.BodySize, &v.PrevSHA256, &v.EditedBy, &at, &v.Reason, &v.Op, &er); err != nil {
			return nil, err
		}
		v.EditedAt, v.Erased = time.UnixMilli(at).UTC(), er.Valid
		if v.Body == nil && !v.Erased {
			v.Body = []byte{}
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// latestEdit is the newest edited version of an entry, for a redrive.
type latestEdit struct {
	version  int
	body     []byte
	editedBy string
}

// latestEdits returns the newest version of each of the entries that were
// edited (entries never edited are absent).
func latestEdits(ctx context.Context, q catalogdb.Querier, es []*Entry) (map[int64]latestEdit, error) {
	if len(es) == 0 {
		return nil, nil
	}
	args := make([]any, len(es))
	for i, e := range es {
		args[i] = e.ID
	}
	rows, err := q.QueryContext(ctx, `SELECT v.entry_id, v.version, v.body, v.edited_by FROM lily_dlq_versions v
		WHERE v.entry_id IN (`+catalogdb.Placeholders(len(es))+`)
		AND v.version = (SELECT MAX(w.version) FROM lily_dlq_versions w WHERE w.entry_id = v.entry_id)`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: edited versions: %w", err)
	}
	defer rows.Close()
	var out map[int64]latestEdit
	for rows.Next() {
		var id int64
		var l latestEdit
		if err := rows.Scan(&id, &l.version, &l.body, &l.editedBy); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[int64]latestEdit{}
		}
		out[id] = l
	}
	return out, rows.Err()
}

// removeVersionData removes the bodies of every version of the entries
// (discard, expire, erase), keeping hashes and sizes, inside tx.
func removeVersionData(ctx context.Context, tx *catalogdb.Tx, now int64, ids []any) error {
	if len(ids) == 0 {
		return nil
	}
	args := append([]any{now}, ids...)
	if _, err := tx.ExecContext(ctx, `UPDATE lily_dlq_versions SET body = NULL, erased_at = COALESCE(erased_at, ?1)
		WHERE body IS NOT NULL AND entry_id IN (`+catalogdb.Placeholders(len(ids))+`)`, args...); err != nil {
		return fmt.Errorf("catalog: remove the edited versions' bodies: %w", err)
	}
	return nil
}

// RedriveMessages returns the messages a redrive sends for es, in order:
// each with its event ID, key and type, its original headers made redrive
// headers (evidence.RedriveHeaders) and, for an edited entry, the latest
// body version with the evidence.HeaderEdited* headers instead of the
// original body.
func (s *Store) RedriveMessages(ctx context.Context, es []*Entry) ([]transport.Message, error) {
	edits, err := latestEdits(ctx, s.db, es)
	if err != nil {
		return nil, err
	}
	msgs := make([]transport.Message, len(es))
	for i, e := range es {
		m := transport.Message{EventID: e.EventID, Key: e.Key, Type: e.Type, Body: e.Body, Headers: evidence.RedriveHeaders(e.Headers)}
		if l, ok := edits[e.ID]; ok {
			m.Body = l.body
			evidence.SetEdited(m.Headers, l.editedBy, l.version, e.BodySHA256)
		}
		msgs[i] = m
	}
	return msgs, nil
}
