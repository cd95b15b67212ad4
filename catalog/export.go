package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// ExportFormat is the value of the format field of every line that
// Export writes (docs/export.md). A reader refuses other values.
const ExportFormat = "lily.dlq.export/v1"

// ExportLine is one line of an export: one entry, as NDJSON. Bytes are
// base64 (Body); Headers is the stored typed-header JSON, verbatim, so
// that header values keep their types (AMQP decimals, unsigned integers,
// tables...). Times are RFC 3339 UTC with milliseconds; a zero time is
// omitted.
type ExportLine struct {
	Format  string `json:"format"`
	ID      int64  `json:"id"`
	Queue   string `json:"queue"`
	EventID string `json:"event_id"`
	Key     string `json:"key"`
	Type    string `json:"type"`
	State   State  `json:"state"`
	// Body is nil when the entry's data was removed (discard, expire,
	// erase) or omitted (BodiesOmitted).
	Body    []byte          `json:"body"`
	Headers json.RawMessage `json:"headers"`
	// BodiesOmitted is set when the exporter was not allowed to read
	// bodies and headers (an HTTP API viewer with omit_bodies=true).
	BodiesOmitted   bool       `json:"bodies_omitted,omitempty"`
	BodySHA256      string     `json:"body_sha256"`
	BodySize        int64      `json:"body_size"`
	HeadersSize     int64      `json:"headers_size"`
	Reason          string     `json:"reason"`
	ErrorType       string     `json:"error_type"`
	ErrorMessage    string     `json:"error_message"`
	Fingerprint     string     `json:"fingerprint"`
	ConsumerVersion string     `json:"consumer_version"`
	Source          string     `json:"source"`
	SourceCoords    string     `json:"source_coords"`
	DeliveryCount   int        `json:"delivery_count"`
	RetryCount      int        `json:"retry_count"`
	RedriveCount    int        `json:"redrive_count"`
	Duplicates      int64      `json:"duplicates"`
	HoldKey         string     `json:"hold_key"`
	DLKey           string     `json:"dl_key,omitempty"`
	DeadLetteredAt  time.Time  `json:"dead_lettered_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
	DecidedAt       *time.Time `json:"decided_at,omitempty"`
	DecidedBy       string     `json:"decided_by,omitempty"`
	Decision        string     `json:"decision,omitempty"`
	ErasedAt        *time.Time `json:"erased_at,omitempty"`
	// History is the entry's audit records (every decision naming its
	// event ID), oldest first.
	History []*AuditRecord `json:"history"`
	// Versions are the edited versions of the body ('lily dlq edit'), 1
	// first; Body is the original (version 0). Absent when never edited.
	Versions []*ExportVersion `json:"versions,omitempty"`
	// Triage is the entry's own triage record with its notes ('lily dlq
	// triage --ids'); a group's record belongs to the catalog, not to an
	// entry, and is not exported. Absent when the entry was never triaged.
	Triage *Triage `json:"triage,omitempty"`
}

// ExportVersion is one edited version of an entry's body. Body is nil
// when the data was removed (discard, expire, erase) or omitted.
type ExportVersion struct {
	Version    int        `json:"version"`
	Body       []byte     `json:"body"`
	BodySHA256 string     `json:"body_sha256"`
	BodySize   int64      `json:"body_size"`
	PrevSHA256 string     `json:"prev_sha256"`
	EditedBy   string     `json:"edited_by"`
	EditedAt   time.Time  `json:"edited_at"`
	Reason     string     `json:"reason"`
	Op         string     `json:"op"`
	ErasedAt   *time.Time `json:"erased_at,omitempty"`
}

// ExportParams are the arguments of Store.Export.
type ExportParams struct {
	// Filter selects the entries, as for list.
	Filter Filter
	// OmitBodies leaves out bodies and headers (BodiesOmitted is set).
	OmitBodies bool
	// Actor is who exports, for the audit record. Defaults to DefaultActor().
	Actor string
	// Selector describes the export for the audit record (e.g. the file).
	Selector string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Progress, when set, is called after each page with the lines
	// written so far.
	Progress func(written int)
}

// exportPage is how many entries one page of an export reads.
const exportPage = 200

// Export writes the entries matching p.Filter to w as NDJSON, one
// ExportLine per line in ID order, reading page by page (memory stays
// flat whatever the catalog's size), and appends one audit record
// (action "export"). It returns the number of lines written.
func (s *Store) Export(ctx context.Context, w io.Writer, p ExportParams) (int, error) {
	d := catalogdb.NewDecision("", p.Actor, p.Filter.String(), p.Now)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the stored headers are written as they are
	n := 0
	f := p.Filter
	for {
		page, err := s.exportPage(ctx, f, p.OmitBodies)
		if err != nil {
			return n, err
		}
		if len(page) == 0 {
			break
		}
		if err := s.exportHistory(ctx, page); err != nil {
			return n, err
		}
		if err := s.exportVersions(ctx, page, p.OmitBodies); err != nil {
			return n, err
		}
		for _, l := range page {
			if l.Triage, err = s.readTriage(ctx, `SELECT assignee, status, ticket, updated_at, updated_by FROM lily_triage_entries WHERE entry_id = ?`,
				`SELECT at, author, note FROM lily_triage_notes WHERE entry_id = ? ORDER BY id`, []any{l.ID}, []any{l.ID}); err != nil {
				return n, err
			}
		}
		for _, l := range page {
			if err := enc.Encode(l); err != nil {
				return n, fmt.Errorf("catalog: export: write: %w", err)
			}
			n++
		}
		if p.Progress != nil {
			p.Progress(n)
		}
		f.AfterID = page[len(page)-1].ID
		if len(page) < exportPage {
			break
		}
	}
	sel := p.Filter.String()
	if p.Selector != "" {
		sel = p.Selector
	}
	detail := ""
	if p.OmitBodies {
		detail = "bodies and headers omitted"
	}
	rec := d.Record(ActionExport, OutcomeExported, false, nil, detail)
	rec.Selector, rec.Count = sel, n
	if err := s.AppendAudit(ctx, rec); err != nil {
		return n, err
	}
	return n, nil
}

// Audit action and outcomes of export and import.
const (
	ActionExport     = "export"
	ActionImport     = "import"
	OutcomeExported  = "exported"
	OutcomeImported  = "imported"
	OutcomeDuplicate = "skipped_duplicates"
)

func (s *Store) exportPage(ctx context.Context, f Filter, omit bool) ([]*ExportLine, error) {
	where, args := f.where()
	rows, err := s.db.QueryContext(ctx, `SELECT `+catalogdb.SelectCols+`, headers, duplicates, COALESCE(dl_key, '') FROM lily_dlq_entries`+
		where+` ORDER BY id LIMIT ?`, append(args, exportPage)...)
	if err != nil {
		return nil, fmt.Errorf("catalog: export: %w", err)
	}
	defer rows.Close()
	var out []*ExportLine
	for rows.Next() {
		var raw []byte
		var dups int64
		var dlKey string
		e, err := catalogdb.ScanEntry(extraRow{rows, []any{&raw, &dups, &dlKey}})
		if err != nil {
			return nil, fmt.Errorf("catalog: export: %w", err)
		}
		l := &ExportLine{Format: ExportFormat, ID: e.ID, Queue: e.Queue, EventID: e.EventID, Key: e.Key, Type: e.Type,
			State: e.State, Body: e.Body, BodySHA256: e.BodySHA256, BodySize: e.BodySize, HeadersSize: e.HeadersSize,
			Reason: e.Reason, ErrorType: e.ErrorType, ErrorMessage: e.ErrorMessage, Fingerprint: e.Fingerprint,
			ConsumerVersion: e.ConsumerVersion, Source: e.Source, SourceCoords: e.SourceCoords,
			DeliveryCount: e.DeliveryCount, RetryCount: e.RetryCount, RedriveCount: e.RedriveCount,
			Duplicates: dups, HoldKey: e.HoldKey, DLKey: dlKey, DeadLetteredAt: e.DeadLetteredAt, UpdatedAt: e.UpdatedAt,
			DecidedBy: e.DecidedBy, Decision: e.Decision, History: []*AuditRecord{}}
		if raw != nil {
			l.Headers = raw
		}
		if omit {
			l.Body, l.Headers, l.BodiesOmitted = nil, nil, true
		}
		if !e.DecidedAt.IsZero() {
			t := e.DecidedAt
			l.DecidedAt = &t
		}
		if !e.ErasedAt.IsZero() {
			t := e.ErasedAt
			l.ErasedAt = &t
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// extraRow scans an entry followed by more columns.
type extraRow struct {
	r     catalogdb.Scanner
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.r.Scan(append(dest, r.extra...)...) }

// exportHistory fills the History of a page's lines: the audit records
// naming their event IDs, read in one query per page.
func (s *Store) exportHistory(ctx context.Context, page []*ExportLine) error {
	byEvent := map[string][]*ExportLine{}
	var ids []any
	for _, l := range page {
		if _, ok := byEvent[l.EventID]; !ok {
			ids = append(ids, l.EventID)
		}
		byEvent[l.EventID] = append(byEvent[l.EventID], l)
	}
	elems := "json_each(a.event_ids) j"
	if s.db.Dialect() == catalogdb.Postgres {
		elems = "jsonb_array_elements_text(a.event_ids::jsonb) j(value)"
	}
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT a.id, a.op, a.at, a.actor, a.action, a.selector, a.dry_run, a.count, a.event_ids, a.outcome, a.detail, j.value
		FROM lily_audit a, `+elems+` WHERE j.value IN (`+catalogdb.Placeholders(len(ids))+`) ORDER BY a.id`, ids...)
	if err != nil {
		return fmt.Errorf("catalog: export: read history: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r         AuditRecord
			at, dry   int64
			evIDs, ev string
		)
		if err := rows.Scan(&r.ID, &r.Op, &at, &r.Actor, &r.Action, &r.Selector, &dry, &r.Count, &evIDs, &r.Outcome, &r.Detail, &ev); err != nil {
			return err
		}
		r.At, r.DryRun = time.UnixMilli(at).UTC(), dry != 0
		if err := json.Unmarshal([]byte(evIDs), &r.EventIDs); err != nil {
			return fmt.Errorf("catalog: audit record %d: event IDs: %w", r.ID, err)
		}
		for _, l := range byEvent[ev] {
			l.History = append(l.History, &r)
		}
	}
	return rows.Err()
}

// exportVersions fills the Versions of a page's lines from
// lily_dlq_versions, in one query per page.
func (s *Store) exportVersions(ctx context.Context, page []*ExportLine, omit bool) error {
	byID := make(map[int64]*ExportLine, len(page))
	ids := make([]any, 0, len(page))
	for _, l := range page {
		byID[l.ID] = l
		ids = append(ids, l.ID)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT entry_id, version, body, body_sha256, body_size, prev_sha256, edited_by, edited_at, reason, op, erased_at
		FROM lily_dlq_versions WHERE entry_id IN (`+catalogdb.Placeholders(len(ids))+`) ORDER BY entry_id, version`, ids...)
	if err != nil {
		return fmt.Errorf("catalog: export: read body versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, at int64
			er     sql.NullInt64
			v      ExportVersion
		)
		if err := rows.Scan(&id, &v.Version, &v.Body, &v.BodySHA256, &v.BodySize, &v.PrevSHA256, &v.EditedBy, &at, &v.Reason, &v.Op, &er); err != nil {
			return err
		}
		v.EditedAt = time.UnixMilli(at).UTC()
		if er.Valid {
			t := time.UnixMilli(er.Int64).UTC()
			v.ErasedAt = &t
		}
		if omit {
			v.Body = nil
		}
		byID[id].Versions = append(byID[id].Versions, &v)
	}
	return rows.Err()
}

// nullTime is a time column value: NULL for the zero time.
func nullTime(t *time.Time) any {
	if t == nil || t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// nullBytes keeps a nil byte slice NULL.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// lineQueue returns the queue an imported line goes to.
func lineQueue(l *ExportLine, override string) string {
	if strings.TrimSpace(override) != "" {
		return override
	}
	return l.Queue
}
