package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// AuditRecord is one row of the audit log: one decision about a set of
// entries (a command writes one row per batch it commits, all with the same
// Op): who (Actor), when (At), what (Action, Outcome, Count, EventIDs),
// selected how (Selector), dry run or not, and why (Detail). Its fields
// are documented on catalogdb.AuditRecord, which the packages layered on
// the store (ledger, redrive, rules) write in their own transactions.
type AuditRecord = catalogdb.AuditRecord

// DefaultActor returns the name of the OS user running the process, or
// "unknown"; decisions are recorded under it unless an actor is given.
func DefaultActor() string { return catalogdb.DefaultActor() }

// NewOp returns a new operation ID: the UTC time and 8 random hex digits,
// e.g. 20261129T120000Z-1a2b3c4d.
func NewOp(now time.Time) string { return catalogdb.NewOp(now) }

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

// AppendAudit appends r to the audit log in its own transaction (for
// decisions that change no entry, such as a redrive stopped by its sample).
// On PostgreSQL it is one INSERT outside any transaction, taking no lock:
// the log is not chained (a row names no other row), so appending reads
// nothing that another writer could change; its ID comes from a sequence.
func (s *Store) AppendAudit(ctx context.Context, r *AuditRecord) error {
	if s.db.Dialect() == catalogdb.Postgres {
		return catalogdb.AppendAudit(ctx, s.db, r)
	}
	return s.db.WithTx(ctx, func(tx *catalogdb.Tx) error { return catalogdb.AppendAudit(ctx, tx, r) })
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
		conds = append(conds, s.db.Dialect().JSONArrayHas("event_ids"))
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
