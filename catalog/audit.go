package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/user"
	"strings"
	"time"
)

// auditTable is the append-only audit log: triggers refuse every UPDATE
// and DELETE, so a row, once committed, stays as written (auditSchema on
// SQLite, pgAuditTriggers on PostgreSQL).
const auditTable = `
CREATE TABLE IF NOT EXISTS lily_audit (
	id        INTEGER PRIMARY KEY,
	op        TEXT    NOT NULL,
	at        INTEGER NOT NULL,
	actor     TEXT    NOT NULL,
	action    TEXT    NOT NULL,
	selector  TEXT    NOT NULL DEFAULT '',
	dry_run   INTEGER NOT NULL DEFAULT 0,
	count     INTEGER NOT NULL DEFAULT 0,
	event_ids TEXT    NOT NULL DEFAULT '[]',
	outcome   TEXT    NOT NULL,
	detail    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS lily_audit_at ON lily_audit(at);
`

// auditSchema is the SQLite audit log with its triggers.
const auditSchema = auditTable + `
CREATE TRIGGER IF NOT EXISTS lily_audit_no_update BEFORE UPDATE ON lily_audit
BEGIN SELECT RAISE(ABORT, 'lily_audit is append-only'); END;
CREATE TRIGGER IF NOT EXISTS lily_audit_no_delete BEFORE DELETE ON lily_audit
BEGIN SELECT RAISE(ABORT, 'lily_audit is append-only'); END;
`

// Audit actions: what was decided.
const (
	ActionRedrive = "redrive"
	ActionDiscard = "discard"
	ActionErase   = "erase"
	ActionExpire  = "expire"
	// ActionRefused records a request that was refused before anything
	// was decided — e.g. an HTTP API token whose role does not allow the
	// action. The selector names the attempted action; the outcome is
	// OutcomeForbidden.
	ActionRefused = "refused"
)

// Audit outcomes. A dry run records what would happen, with the "would_"
// outcomes and DryRun set.
const (
	OutcomeRedriven        = "redriven"
	OutcomeNeedsManual     = "needs_manual"
	OutcomeDiscarded       = "discarded"
	OutcomeErased          = "erased"
	OutcomeExpired         = "expired"
	OutcomeFailed          = "failed"
	OutcomeStopped         = "stopped"
	OutcomeObserved        = "observed_clean"
	OutcomeEmpty           = "nothing_selected"
	OutcomeWouldRedrive    = "would_redrive"
	OutcomeWouldNeedManual = "would_need_manual"
	OutcomeWouldDiscard    = "would_discard"
	OutcomeWouldErase      = "would_erase"
	OutcomeWouldExpire     = "would_expire"
	OutcomeForbidden       = "forbidden"
)

// AuditRecord is one row of the audit log: one decision about a set of
// entries (a command writes one row per batch it commits, all with the same
// Op).
type AuditRecord struct {
	ID int64 `json:"id"`
	// Op identifies the command (operation) the row belongs to.
	Op string `json:"op"`
	// At is when the decision was recorded.
	At time.Time `json:"at"`
	// Actor is who decided: --actor or the OS user.
	Actor string `json:"actor"`
	// Action is one of the Action constants.
	Action string `json:"action"`
	// Selector is the filter and options the entries were chosen with.
	Selector string `json:"selector"`
	// DryRun is set when nothing was changed on purpose.
	DryRun bool `json:"dry_run"`
	// Count is the number of entries the row is about.
	Count int `json:"count"`
	// EventIDs are their event IDs.
	EventIDs []string `json:"event_ids"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
	// Detail says why (a discard reason) or what went wrong.
	Detail string `json:"detail,omitempty"`
}

// appendAudit writes r inside tx, setting r.ID and a zero r.At.
func appendAudit(ctx context.Context, tx *txHandle, r *AuditRecord) error {
	if r.At.IsZero() {
		r.At = time.Now()
	}
	r.At = r.At.UTC().Truncate(time.Millisecond)
	if r.EventIDs == nil {
		r.EventIDs = []string{}
	}
	ids, err := json.Marshal(r.EventIDs)
	if err != nil {
		return err
	}
	err = tx.QueryRowContext(ctx, `INSERT INTO lily_audit(op, at, actor, action, selector, dry_run, count, event_ids, outcome, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, r.Op, r.At.UnixMilli(), r.Actor, r.Action, r.Selector, boolInt(r.DryRun), r.Count,
		string(ids), r.Outcome, r.Detail).Scan(&r.ID)
	if err != nil {
		return fmt.Errorf("catalog: write audit record: %w", err)
	}
	return nil
}

// AppendAudit appends r to the audit log in its own transaction (for
// decisions that change no entry, such as a redrive stopped by its sample).
func (s *Store) AppendAudit(ctx context.Context, r *AuditRecord) error {
	return withTx(ctx, s.db, func(tx *txHandle) error { return appendAudit(ctx, tx, r) })
}

// AuditFilter selects audit records. Zero fields select everything.
type AuditFilter struct {
	// Since selects records at or after it.
	Since time.Time
	// Action selects one action.
	Action string
	// Op selects one operation.
	Op string
	// Actor selects one actor.
	Actor string
	// EventID selects the records that name this event ID: the history of
	// one message.
	EventID string
	// Newest returns the newest records first (default: oldest first).
	Newest bool
	// Limit caps the number of records; 0 means all.
	Limit int
}

// EachAudit streams the audit records matching f, oldest first (newest
// first with f.Newest), to fn. fn
// must not write to the store (the iteration holds its connection).
func (s *Store) EachAudit(ctx context.Context, f AuditFilter, fn func(*AuditRecord) error) error {
	var conds []string
	var args []any
	if !f.Since.IsZero() {
		conds = append(conds, "at >= ?")
		args = append(args, f.Since.UnixMilli())
	}
	if f.Action != "" {
		conds = append(conds, "action = ?")
		args = append(args, f.Action)
	}
	if f.Op != "" {
		conds = append(conds, "op = ?")
		args = append(args, f.Op)
	}
	if f.Actor != "" {
		conds = append(conds, "actor = ?")
		args = append(args, f.Actor)
	}
	if f.EventID != "" {
		conds = append(conds, s.db.d.jsonArrayHas("event_ids"))
		args = append(args, f.EventID)
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	order := " ORDER BY id"
	if f.Newest {
		order += " DESC"
	}
	if f.Limit > 0 {
		order += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, op, at, actor, action, selector, dry_run, count, event_ids, outcome, detail
		FROM lily_audit`+where+order, args...)
	if err != nil {
		return fmt.Errorf("catalog: read audit log: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r      AuditRecord
			at     int64
			dryRun int64
			ids    string
		)
		if err := rows.Scan(&r.ID, &r.Op, &at, &r.Actor, &r.Action, &r.Selector, &dryRun, &r.Count, &ids, &r.Outcome, &r.Detail); err != nil {
			return err
		}
		r.DryRun = dryRun != 0
		r.At = time.UnixMilli(at).UTC()
		if err := json.Unmarshal([]byte(ids), &r.EventIDs); err != nil {
			return fmt.Errorf("catalog: audit record %d: event IDs: %w", r.ID, err)
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// DefaultActor returns the name of the OS user running the process, or
// "unknown"; decisions are recorded under it unless an actor is given.
func DefaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// NewOp returns a new operation ID: the UTC time and 8 random hex digits,
// e.g. 20261129T120000Z-1a2b3c4d.
func NewOp(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// decision is what every decision-making operation shares: who, under
// which operation, selected how.
type decision struct {
	op, actor, selector string
	now                 func() time.Time
	// redriveAs is the audit action of the redrives this decision makes
	// (ActionRedrive when empty; ActionUnpark for an unpark's head).
	redriveAs string
}

// redriveAction is the audit action of d's redrives.
func (d decision) redriveAction() string {
	if d.redriveAs != "" {
		return d.redriveAs
	}
	return ActionRedrive
}

func newDecision(op, actor, selector string, now func() time.Time) decision {
	if now == nil {
		now = time.Now
	}
	if actor == "" {
		actor = DefaultActor()
	}
	if op == "" {
		op = NewOp(now())
	}
	return decision{op: op, actor: actor, selector: selector, now: now}
}

// record builds an audit record of this decision.
func (d decision) record(action, outcome string, dryRun bool, ids []string, detail string) *AuditRecord {
	return &AuditRecord{Op: d.op, At: d.now(), Actor: d.actor, Action: action, Selector: d.selector,
		DryRun: dryRun, Count: len(ids), EventIDs: ids, Outcome: outcome, Detail: detail}
}
