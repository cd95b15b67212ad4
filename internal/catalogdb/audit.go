package catalogdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/user"
	"time"
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
	// Action is one of the Action constants of package catalog.
	Action string `json:"action"`
	// Selector is the filter and options the entries were chosen with.
	Selector string `json:"selector"`
	// DryRun is set when nothing was changed on purpose.
	DryRun bool `json:"dry_run"`
	// Count is the number of entries the row is about.
	Count int `json:"count"`
	// EventIDs are their event IDs.
	EventIDs []string `json:"event_ids"`
	// Outcome is one of the Outcome constants of package catalog.
	Outcome string `json:"outcome"`
	// Detail says why (a discard reason) or what went wrong.
	Detail string `json:"detail,omitempty"`
}

// AppendAudit writes r inside tx, setting r.ID and a zero r.At.
func AppendAudit(ctx context.Context, tx Querier, r *AuditRecord) error {
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
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, r.Op, r.At.UnixMilli(), r.Actor, r.Action, r.Selector, BoolInt(r.DryRun), r.Count,
		string(ids), r.Outcome, r.Detail).Scan(&r.ID)
	if err != nil {
		return fmt.Errorf("catalog: write audit record: %w", err)
	}
	return nil
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

// Decision is what every decision-making operation shares: who, under
// which operation, selected how. Its audit records (Record) carry them.
type Decision struct {
	// Op is the operation ID of the audit records.
	Op string
	// Actor is who decides.
	Actor string
	// Selector is the filter and options the entries were chosen with.
	Selector string
	// Now is the clock of the records.
	Now func() time.Time
}

// NewDecision returns the decision of actor (DefaultActor when empty)
// under operation op (a NewOp when empty), with now as its clock
// (time.Now when nil).
func NewDecision(op, actor, selector string, now func() time.Time) Decision {
	if now == nil {
		now = time.Now
	}
	if actor == "" {
		actor = DefaultActor()
	}
	if op == "" {
		op = NewOp(now())
	}
	return Decision{Op: op, Actor: actor, Selector: selector, Now: now}
}

// Record builds an audit record of this decision.
func (d Decision) Record(action, outcome string, dryRun bool, ids []string, detail string) *AuditRecord {
	return &AuditRecord{Op: d.Op, At: d.Now(), Actor: d.Actor, Action: action, Selector: d.Selector,
		DryRun: dryRun, Count: len(ids), EventIDs: ids, Outcome: outcome, Detail: detail}
}
