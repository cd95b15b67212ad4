package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// ActionTriage records a triage change (assignee, status, ticket, note).
const ActionTriage = "triage"

// OutcomeTriaged is the outcome of a triage change.
const OutcomeTriaged = "triaged"

// The triage statuses.
const (
	TriageInvestigating = "investigating"
	TriageNeedsFix      = "needs_fix"
	// TriageKnownIssue marks a failure the team knows and accepts for now:
	// on a group it keeps /healthz and the LilyDLQNotEmpty alert quiet for
	// that fingerprint (the retention deadline and inflow spikes still
	// alarm).
	TriageKnownIssue = "known_issue"
	TriageWontFix    = "wont_fix"
)

// TriageStatuses are the valid statuses, in workflow order.
var TriageStatuses = []string{TriageInvestigating, TriageNeedsFix, TriageKnownIssue, TriageWontFix}

// Limits of the triage fields.
const (
	maxAssignee = 200
	maxTicket   = 2000
	maxNote     = 4000
)

// TriageError is a triage change refused for one field: the field (as the
// CLI flag and the API member name it: assign, status, ticket, note), the
// value and the fix.
type TriageError struct {
	Field string
	Msg   string
}

// Error returns the message, which names the field, the value and the fix.
func (e *TriageError) Error() string { return e.Msg }

// TriageChange is what one triage sets. A nil field is left as it is; a
// pointer to "" clears it. Note, when set, is appended to the history.
type TriageChange struct {
	Assignee *string `json:"assign,omitempty"`
	Status   *string `json:"status,omitempty"`
	Ticket   *string `json:"ticket,omitempty"`
	Note     string  `json:"note,omitempty"`
}

// Validate checks every field, returning the first problem as a
// *TriageError.
func (c TriageChange) Validate() error {
	if c.Assignee == nil && c.Status == nil && c.Ticket == nil && strings.TrimSpace(c.Note) == "" {
		return &TriageError{Field: "status", Msg: "triage: nothing to change: set an assignee, a status, a ticket or a note"}
	}
	if c.Assignee != nil {
		a := *c.Assignee
		if utf8.RuneCountInString(a) > maxAssignee || strings.TrimSpace(a) != a || hasControl(a) {
			return &TriageError{Field: "assign", Msg: fmt.Sprintf("assign %q: want a name of at most %d characters, without control characters or surrounding spaces (\"\" clears it)", a, maxAssignee)}
		}
	}
	if c.Status != nil && *c.Status != "" && !validTriageStatus(*c.Status) {
		return &TriageError{Field: "status", Msg: fmt.Sprintf("status %q: want one of %s (\"\" clears it)", *c.Status, strings.Join(TriageStatuses, ", "))}
	}
	if c.Ticket != nil && *c.Ticket != "" {
		t := *c.Ticket
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(t) > maxTicket || hasControl(t) {
			return &TriageError{Field: "ticket", Msg: fmt.Sprintf("ticket %q: want an http:// or https:// URL of the ticket, e.g. https://tracker.example.com/ISSUE-42 (\"\" clears it)", t)}
		}
	}
	if utf8.RuneCountInString(c.Note) > maxNote {
		return &TriageError{Field: "note", Msg: fmt.Sprintf("note: %d characters, at most %d: shorten it or link a document", utf8.RuneCountInString(c.Note), maxNote)}
	}
	return nil
}

// detail is the audit form of c.
func (c TriageChange) detail() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func validTriageStatus(s string) bool {
	for _, v := range TriageStatuses {
		if s == v {
			return true
		}
	}
	return false
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return true
		}
	}
	return false
}

// TriageParams are the arguments of TriageEntries.
type TriageParams struct {
	// Filter selects the entries.
	Filter Filter
	// Limit caps the number of entries; 0 means all that match.
	Limit int
	// Change is what to set.
	Change TriageChange
	// Actor is who triages. Defaults to DefaultActor().
	Actor string
	// Op is the operation ID for the audit log. Defaults to NewOp.
	Op string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// OnEntry, if set, is called for each entry triaged.
	OnEntry func(EntryRef)
}

// TriageResult is what a triage changed.
type TriageResult struct {
	// Op is the operation ID under which the audit log records it.
	Op string `json:"op"`
	// Count is the number of entries triaged (for a group: the entries it
	// holds now; later ones inherit its status).
	Count int `json:"count"`
	// Groups are the groups triaged (empty for an entry triage).
	Groups []GroupKey `json:"groups"`
}

// GroupKey names a triage group: the entries of one queue that share an
// error fingerprint.
type GroupKey struct {
	Queue       string `json:"queue"`
	Fingerprint string `json:"fingerprint"`
}

// upsertTriage is the statement that sets a triage record: ?1.. are the
// key columns, then assignee, status, ticket, now, actor and whether each
// of the three is set (1) or kept (0).
func upsertTriage(table, keyCols string, nkeys int) string {
	keep := func(col string, flag int) string {
		return fmt.Sprintf("%s = CASE WHEN ?%d = 1 THEN excluded.%s ELSE %s.%s END", col, flag, col, table, col)
	}
	n := nkeys
	return fmt.Sprintf(`INSERT INTO %s (%s, assignee, status, ticket, updated_at, updated_by)
		VALUES (%s, ?%d, ?%d, ?%d, ?%d, ?%d)
		ON CONFLICT (%s) DO UPDATE SET %s, %s, %s, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
		table, keyCols, numbered(1, nkeys), n+1, n+2, n+3, n+4, n+5, keyCols,
		keep("assignee", n+6), keep("status", n+7), keep("ticket", n+8))
}

// numbered returns "?from, ..., ?(from+n-1)".
func numbered(from, n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("?%d", from+i)
	}
	return strings.Join(p, ", ")
}

// changeArgs are the value arguments of upsertTriage for c.
func (c TriageChange) changeArgs(now int64, actor string) []any {
	val := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	set := func(p *string) int64 { return catalogdb.BoolInt(p != nil) }
	return []any{val(c.Assignee), val(c.Status), val(c.Ticket), now, actor, set(c.Assignee), set(c.Status), set(c.Ticket)}
}

// TriageEntries sets the triage of the selected entries (any state; a
// filter usually names held ones): assignee, status, ticket, and a note
// appended to each entry's history. Each batch is one transaction with
// its audit record (action triage, the change as the detail).
func (s *Store) TriageEntries(ctx context.Context, p TriageParams) (TriageResult, error) {
	if err := p.Change.Validate(); err != nil {
		return TriageResult{}, err
	}
	d := catalogdb.NewDecision(p.Op, p.Actor, p.Filter.String(), p.Now)
	res := TriageResult{Op: d.Op, Groups: []GroupKey{}}
	detail := p.Change.detail()
	upsert := upsertTriage("lily_triage_entries", "entry_id", 1)
	var last int64
	for p.Limit <= 0 || res.Count < p.Limit {
		n := decisionBatch
		if p.Limit > 0 {
			n = min(n, p.Limit-res.Count)
		}
		var refs []EntryRef
		var traces map[int64]trace.SpanContext
		start := time.Now()
		err := s.db.WithKeyed(ctx, nil, func(tx *catalogdb.Tx) error {
			f := p.Filter
			f.AfterID = last
			var err error
			if refs, err = pageRefs(ctx, tx, f, "", n, true); err != nil || len(refs) == 0 {
				return err
			}
			if traces, err = s.messageTraces(ctx, tx, refs); err != nil {
				return err
			}
			now := d.Now().UnixMilli()
			ids := make([]string, len(refs))
			for i, r := range refs {
				ids[i] = r.EventID
				if _, err := tx.ExecContext(ctx, upsert, append([]any{r.ID}, p.Change.changeArgs(now, d.Actor)...)...); err != nil {
					return fmt.Errorf("catalog: triage entry %d: %w", r.ID, err)
				}
				if strings.TrimSpace(p.Change.Note) != "" {
					if _, err := tx.ExecContext(ctx, `INSERT INTO lily_triage_notes(entry_id, queue, fingerprint, at, author, note)
						SELECT id, queue, fingerprint, ?, ?, ? FROM lily_dlq_entries WHERE id = ?`, now, d.Actor, p.Change.Note, r.ID); err != nil {
						return fmt.Errorf("catalog: triage note on entry %d: %w", r.ID, err)
					}
				}
			}
			return catalogdb.AppendAudit(ctx, tx, d.Record(ActionTriage, OutcomeTriaged, false, ids, detail))
		})
		if s.tracer != nil && len(refs) > 0 {
			ws := decisionSpans(d, ActionTriage, OutcomeTriaged, false, refs, traces)
			for i := range ws {
				ws[i].table = "lily_triage_entries"
			}
			s.emitSpans(ctx, start, ws, err)
		}
		if err != nil {
			return res, err
		}
		if len(refs) == 0 {
			break
		}
		last = refs[len(refs)-1].ID
		res.Count += len(refs)
		if p.OnEntry != nil {
			for _, r := range refs {
				p.OnEntry(r)
			}
		}
	}
	if res.Count == 0 {
		if err := s.AppendAudit(ctx, d.Record(ActionTriage, OutcomeEmpty, false, nil, detail)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// TriageGroupParams are the arguments of TriageGroup.
type TriageGroupParams struct {
	// Queue is the group's queue. Empty: every queue that has entries of
	// the fingerprint (one group each).
	Queue string
	// Fingerprint is the error message fingerprint (evidence.Fingerprint,
	// as 'lily dlq group --by fingerprint' prints it).
	Fingerprint string
	// Change is what to set.
	Change TriageChange
	// Actor is who triages. Defaults to DefaultActor().
	Actor string
	// Op is the operation ID for the audit log. Defaults to NewOp.
	Op string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// ErrNoGroup is returned by TriageGroup without a queue when no queue has
// entries of the fingerprint.
var ErrNoGroup = errors.New("catalog: no entries with this fingerprint")

// TriageGroup sets the triage of the group of entries sharing a
// fingerprint in a queue (in every queue that has some, without one). The
// record is the group's, not its entries': entries dead-lettered later
// with the same fingerprint inherit its status. One transaction per
// group, with its audit record (selector: queue and fingerprint; count:
// the entries held now).
func (s *Store) TriageGroup(ctx context.Context, p TriageGroupParams) (TriageResult, error) {
	if err := p.Change.Validate(); err != nil {
		return TriageResult{}, err
	}
	if p.Fingerprint == "" {
		return TriageResult{}, &TriageError{Field: "fingerprint", Msg: "triage: a group is named by its fingerprint (as 'lily dlq group --by fingerprint' prints it)"}
	}
	d := catalogdb.NewDecision(p.Op, p.Actor, "", p.Now)
	res := TriageResult{Op: d.Op, Groups: []GroupKey{}}
	queues := []string{p.Queue}
	if p.Queue == "" {
		gs, err := s.Group(ctx, "queue", Filter{Fingerprint: p.Fingerprint})
		if err != nil {
			return res, err
		}
		queues = queues[:0]
		for _, g := range gs {
			queues = append(queues, g.Key)
		}
		if len(queues) == 0 {
			return res, fmt.Errorf("%w %q: no queue has entries of it yet; name the queue (--queue Q) to triage it before its first dead letter", ErrNoGroup, p.Fingerprint)
		}
	}
	detail := p.Change.detail()
	upsert := upsertTriage("lily_triage_groups", "queue, fingerprint", 2)
	for _, q := range queues {
		sel, _ := json.Marshal(map[string]any{"group": GroupKey{Queue: q, Fingerprint: p.Fingerprint}})
		gd := d
		gd.Selector = string(sel)
		start := time.Now()
		err := s.db.WithKeyed(ctx, nil, func(tx *catalogdb.Tx) error {
			now := gd.Now().UnixMilli()
			if _, err := tx.ExecContext(ctx, upsert, append([]any{q, p.Fingerprint}, p.Change.changeArgs(now, gd.Actor)...)...); err != nil {
				return fmt.Errorf("catalog: triage group %s/%s: %w", q, p.Fingerprint, err)
			}
			if strings.TrimSpace(p.Change.Note) != "" {
				if _, err := tx.ExecContext(ctx, `INSERT INTO lily_triage_notes(entry_id, queue, fingerprint, at, author, note) VALUES (0, ?, ?, ?, ?, ?)`,
					q, p.Fingerprint, now, gd.Actor, p.Change.Note); err != nil {
					return fmt.Errorf("catalog: triage note on group %s/%s: %w", q, p.Fingerprint, err)
				}
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_dlq_entries WHERE fingerprint = ? AND `+catalogdb.HeldCond+` AND queue = ?`,
				p.Fingerprint, q).Scan(&n); err != nil {
				return err
			}
			r := gd.Record(ActionTriage, OutcomeTriaged, false, nil, detail)
			r.Count = n
			res.Count += n
			return catalogdb.AppendAudit(ctx, tx, r)
		})
		if s.tracer != nil {
			s.emitSpans(ctx, start, []writeSpan{groupSpan(gd, q, p.Fingerprint)}, err)
		}
		if err != nil {
			return res, err
		}
		res.Groups = append(res.Groups, GroupKey{Queue: q, Fingerprint: p.Fingerprint})
	}
	return res, nil
}

// Triage is one triage record: of an entry or of a group.
type Triage struct {
	Assignee  string       `json:"assignee,omitempty"`
	Status    string       `json:"status,omitempty"`
	Ticket    string       `json:"ticket,omitempty"`
	UpdatedAt time.Time    `json:"updated_at"`
	UpdatedBy string       `json:"updated_by"`
	Notes     []TriageNote `json:"notes"`
}

// TriageNote is one note of the append-only history.
type TriageNote struct {
	At     time.Time `json:"at"`
	Author string    `json:"author"`
	Note   string    `json:"note"`
}

// EntryTriage is the triage of one entry: its own record, its group's,
// and the status in effect (its own, else its group's).
type EntryTriage struct {
	Entry  *Triage `json:"entry,omitempty"`
	Group  *Triage `json:"group,omitempty"`
	Status string  `json:"status,omitempty"`
}

// EntryTriage returns the triage of entry e, with both note histories.
func (s *Store) EntryTriage(ctx context.Context, e *Entry) (EntryTriage, error) {
	var out EntryTriage
	var err error
	if out.Entry, err = s.readTriage(ctx, `SELECT assignee, status, ticket, updated_at, updated_by FROM lily_triage_entries WHERE entry_id = ?`,
		`SELECT at, author, note FROM lily_triage_notes WHERE entry_id = ? ORDER BY id`, []any{e.ID}, []any{e.ID}); err != nil {
		return out, err
	}
	if out.Group, err = s.GroupTriage(ctx, e.Queue, e.Fingerprint); err != nil {
		return out, err
	}
	out.Status = effectiveStatus(out.Entry, out.Group)
	return out, nil
}

func effectiveStatus(entry, group *Triage) string {
	if entry != nil && entry.Status != "" {
		return entry.Status
	}
	if group != nil {
		return group.Status
	}
	return ""
}

// GroupTriage returns the triage record of a group with its notes, or nil
// when it has none.
func (s *Store) GroupTriage(ctx context.Context, queue, fingerprint string) (*Triage, error) {
	return s.readTriage(ctx, `SELECT assignee, status, ticket, updated_at, updated_by FROM lily_triage_groups WHERE queue = ? AND fingerprint = ?`,
		`SELECT at, author, note FROM lily_triage_notes WHERE queue = ? AND fingerprint = ? AND entry_id = 0 ORDER BY id`,
		[]any{queue, fingerprint}, []any{queue, fingerprint})
}

func (s *Store) readTriage(ctx context.Context, q, notes string, args, nargs []any) (*Triage, error) {
	var t Triage
	var at int64
	err := s.db.QueryRowContext(ctx, q, args...).Scan(&t.Assignee, &t.Status, &t.Ticket, &at, &t.UpdatedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: read triage: %w", err)
	}
	t.UpdatedAt = time.UnixMilli(at).UTC()
	t.Notes = []TriageNote{}
	rows, err := s.db.QueryContext(ctx, notes, nargs...)
	if err != nil {
		return nil, fmt.Errorf("catalog: read triage notes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n TriageNote
		if err := rows.Scan(&at, &n.Author, &n.Note); err != nil {
			return nil, err
		}
		n.At = time.UnixMilli(at).UTC()
		t.Notes = append(t.Notes, n)
	}
	return &t, rows.Err()
}

// GroupTriages returns the triage records (without notes) of the groups
// of queue (every queue when empty), by queue and fingerprint.
func (s *Store) GroupTriages(ctx context.Context, queue string) (map[GroupKey]*Triage, error) {
	q := `SELECT queue, fingerprint, assignee, status, ticket, updated_at, updated_by FROM lily_triage_groups`
	var args []any
	if queue != "" {
		q += ` WHERE queue = ?`
		args = append(args, queue)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: read group triage: %w", err)
	}
	defer rows.Close()
	out := map[GroupKey]*Triage{}
	for rows.Next() {
		var k GroupKey
		var t Triage
		var at int64
		if err := rows.Scan(&k.Queue, &k.Fingerprint, &t.Assignee, &t.Status, &t.Ticket, &at, &t.UpdatedBy); err != nil {
			return nil, err
		}
		t.UpdatedAt, t.Notes = time.UnixMilli(at).UTC(), []TriageNote{}
		out[k] = &t
	}
	return out, rows.Err()
}

// TriageStatusOf returns the status in effect of each entry of es that
// has one (its own, else its group's), by entry ID: for listings.
func (s *Store) TriageStatusOf(ctx context.Context, es []*Entry) (map[int64]string, error) {
	out := map[int64]string{}
	if len(es) == 0 {
		return out, nil
	}
	args := make([]any, len(es))
	for i, e := range es {
		args[i] = e.ID
	}
	rows, err := s.db.QueryContext(ctx, `SELECT e.id, COALESCE(NULLIF(te.status, ''), tg.status, '') FROM lily_dlq_entries e
		LEFT JOIN lily_triage_entries te ON te.entry_id = e.id
		LEFT JOIN lily_triage_groups tg ON tg.queue = e.queue AND tg.fingerprint = e.fingerprint
		WHERE e.id IN (`+catalogdb.Placeholders(len(es))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: read triage status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		if st != "" {
			out[id] = st
		}
	}
	return out, rows.Err()
}

// KnownIssueHeld counts, per queue, the held entries whose status in
// effect is known_issue: their own, or their group's when they have none.
// /healthz and the lily_dlq_alarming_entries metric leave them out. It
// reads the held entries of known_issue groups through the fingerprint
// index and the entries with a status of their own, never the whole table.
func (s *Store) KnownIssueHeld(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT queue, CAST(SUM(n) AS BIGINT) FROM (
		SELECT e.queue AS queue, COUNT(*) AS n FROM lily_triage_groups tg
			JOIN lily_dlq_entries e ON e.fingerprint = tg.fingerprint AND e.queue = tg.queue AND e.`+catalogdb.HeldCond+`
			WHERE tg.status = 'known_issue' GROUP BY e.queue
		UNION ALL
		SELECT e.queue AS queue,
			SUM(CASE WHEN te.status = 'known_issue' THEN 1 ELSE 0 END) - SUM(CASE WHEN tg.status = 'known_issue' THEN 1 ELSE 0 END) AS n
			FROM lily_triage_entries te
			JOIN lily_dlq_entries e ON e.id = te.entry_id AND e.`+catalogdb.HeldCond+`
			LEFT JOIN lily_triage_groups tg ON tg.queue = e.queue AND tg.fingerprint = e.fingerprint
			WHERE te.status <> '' GROUP BY e.queue
	) k GROUP BY queue`)
	if err != nil {
		return nil, fmt.Errorf("catalog: count known issues: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return nil, err
		}
		if n > 0 {
			out[q] = n
		}
	}
	return out, rows.Err()
}

// GroupTriage is the triage record of a group in one queue.
type GroupTriage struct {
	Queue string `json:"queue"`
	Triage
}

// AttachGroupTriage sets the Triage of each group of a grouping by
// fingerprint: the records of that fingerprint in queue (in every queue
// when queue is empty), ordered by queue.
func (s *Store) AttachGroupTriage(ctx context.Context, queue string, gs []Group) error {
	all, err := s.GroupTriages(ctx, queue)
	if err != nil || len(all) == 0 {
		return err
	}
	byFP := map[string][]GroupTriage{}
	for k, t := range all {
		byFP[k.Fingerprint] = append(byFP[k.Fingerprint], GroupTriage{Queue: k.Queue, Triage: *t})
	}
	for i := range gs {
		ts := byFP[gs[i].Key]
		sort.Slice(ts, func(a, b int) bool { return ts[a].Queue < ts[b].Queue })
		gs[i].Triage = ts
	}
	return nil
}
