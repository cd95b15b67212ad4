package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// ErrEmptyReason is returned by Discard without a reason.
var ErrEmptyReason = errors.New("catalog: a discard needs a reason (it is kept with the record)")

// ErrNoSubject is returned by Erase without a key, entry IDs or event IDs:
// an erasure names its data subject, it never sweeps the whole catalog.
var ErrNoSubject = errors.New("catalog: erase needs a key, entry IDs or event IDs")

// decisionBatch is the most entries one decision transaction covers.
const decisionBatch = 500

// EntryRef identifies an entry in callbacks and listings, without its body.
type EntryRef struct {
	ID             int64     `json:"id"`
	Queue          string    `json:"queue"`
	EventID        string    `json:"event_id"`
	State          State     `json:"state"`
	RedriveCount   int       `json:"redrive_count"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
}

// pageRefs returns up to n entries matching f (and the extra SQL
// condition, if any) in ID order. With lock, the decision about to change
// them locks their rows on PostgreSQL, in ID order (so two decisions never
// wait for each other in a cycle): a row another decision changed is read
// again once it committed, and left out if it no longer matches.
func pageRefs(ctx context.Context, q catalogdb.Querier, f Filter, extra string, n int, lock bool) ([]EntryRef, error) {
	where, args := f.where()
	if extra != "" {
		if where == "" {
			where = " WHERE " + extra
		} else {
			where += " AND " + extra
		}
	}
	rows, err := q.QueryContext(ctx, `SELECT id, queue, event_id, state, redrive_count, dead_lettered_at FROM `+f.table(q.Dialect())+
		where+` ORDER BY id LIMIT ?`+lockRows(q, lock), append(args, n)...)
	if err != nil {
		return nil, fmt.Errorf("catalog: select entries: %w", err)
	}
	defer rows.Close()
	var out []EntryRef
	for rows.Next() {
		var r EntryRef
		var st string
		var at int64
		if err := rows.Scan(&r.ID, &r.Queue, &r.EventID, &st, &r.RedriveCount, &at); err != nil {
			return nil, err
		}
		r.State, r.DeadLetteredAt = State(st), time.UnixMilli(at).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// DecideParams are the arguments of Discard and Erase.
type DecideParams struct {
	// Filter selects the entries. Discard considers held entries only
	// (pending, parked, needs_manual); Erase every entry not yet erased.
	Filter Filter
	// Limit caps the number of entries; 0 means all that match.
	Limit int
	// DryRun lists what would happen and changes nothing (it is audited).
	DryRun bool
	// Reason is why: required for Discard, optional for Erase (e.g. a
	// request reference).
	Reason string
	// Actor is who decides. Defaults to DefaultActor().
	Actor string
	// Op is the operation ID for the audit log. Defaults to NewOp.
	Op string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// OnEntry, if set, is called for each entry decided (or that would be).
	OnEntry func(EntryRef)
}

// DecideResult summarises a Discard, Erase or Expire.
type DecideResult struct {
	// Op is the operation ID under which the audit log records it.
	Op string `json:"op"`
	// Count is the number of entries decided (or that would be).
	Count int `json:"count"`
	// DryRun repeats the parameter.
	DryRun bool `json:"dry_run"`
}

// removeData is the assignment that ends an entry's data (discard, expire,
// erase): the body and headers go, their sizes and the removal time
// (erased_at, ?1) stay with the record. An UPDATE reads the old row, so the
// sizes are those of the data removed.
const removeData = `body_size = COALESCE(body_size, LENGTH(body), 0), headers_size = COALESCE(headers_size, LENGTH(headers), 0),
		 body = NULL, headers = NULL, erased_at = COALESCE(erased_at, ?1)`

// lockRows is the FOR UPDATE that pageRefs adds with lock.
func lockRows(q catalogdb.Querier, lock bool) string {
	if !lock {
		return ""
	}
	return q.Dialect().ForUpdate()
}

// Discard marks the selected held entries discarded: they leave the work
// list with a record (event ID, reason and evidence columns, body hash and
// sizes, who, when, why) and lose their body and headers in the same
// transaction — a dead letter holds personal data, and a discard is its
// end of life. Each batch is one transaction that changes the entries and
// appends the audit record together.
func (s *Store) Discard(ctx context.Context, p DecideParams) (DecideResult, error) {
	if strings.TrimSpace(p.Reason) == "" {
		return DecideResult{}, ErrEmptyReason
	}
	f, err := heldOnly(p.Filter)
	if err != nil {
		return DecideResult{}, err
	}
	d := catalogdb.NewDecision(p.Op, p.Actor, f.String(), p.Now)
	return s.decide(ctx, d, f, "", p, ActionDiscard, OutcomeDiscarded, OutcomeWouldDiscard,
		`state = 'discarded', `+removeData+`, decided_at = ?1, decided_by = ?2, decision = ?3, updated_at = ?1`, "discarded: "+p.Reason)
}

// Erase removes the bodies, headers and error messages of the selected
// entries — a data subject's, by key, entry IDs or event IDs — and keeps
// each as a tombstone: event ID, body hash, key, reason, who and when. An
// entry still held in the work list becomes erased (counted as discarded in
// the ledger); a redriven or discarded one keeps its state.
func (s *Store) Erase(ctx context.Context, p DecideParams) (DecideResult, error) {
	f := p.Filter
	if f.Key == "" && len(f.IDs) == 0 && len(f.EventIDs) == 0 {
		return DecideResult{}, ErrNoSubject
	}
	why := "erased"
	if p.Reason != "" {
		why += ": " + p.Reason
	}
	d := catalogdb.NewDecision(p.Op, p.Actor, f.String(), p.Now)
	// Not yet wholly erased: a discarded or expired entry has lost its
	// body and headers but keeps its (redacted) error message.
	return s.decide(ctx, d, f, "(body IS NOT NULL OR headers IS NOT NULL OR error_message <> '' OR fingerprint <> '')", p, ActionErase, OutcomeErased, OutcomeWouldErase,
		removeData+`, error_message = '', fingerprint = '',
		 state = CASE WHEN state IN ('pending', 'parked', 'needs_manual') THEN 'erased' ELSE state END,
		 decided_at = ?1, decided_by = ?2, decision = ?3, updated_at = ?1`, why)
}

// heldOnly restricts f to held states, refusing states that are not held.
func heldOnly(f Filter) (Filter, error) {
	if len(f.States) == 0 {
		f.States = HeldStates
		return f, nil
	}
	for _, st := range f.States {
		if !st.IsHeld() {
			return f, fmt.Errorf("catalog: state %q is not in the work list: only pending, parked and needs_manual entries can be decided", st)
		}
	}
	return f, nil
}

// decide runs one decision over the selection in batches: each batch is
// selected, changed (set is the SQL assignment, with ?1 = now, ?2 = actor,
// ?3 = why) and audited in one transaction. A selection of nothing is
// audited too.
func (s *Store) decide(ctx context.Context, d catalogdb.Decision, f Filter, extra string, p DecideParams,
	action, outcome, wouldOutcome, set, why string) (DecideResult, error) {
	res := DecideResult{Op: d.Op, DryRun: p.DryRun}
	for _, sf := range f.perState() {
		if err := s.decidePass(ctx, d, sf, extra, p, action, outcome, wouldOutcome, set, why, &res); err != nil {
			return res, err
		}
	}
	if res.Count == 0 {
		if err := s.AppendAudit(ctx, d.Record(action, OutcomeEmpty, p.DryRun, nil, why)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// decidePass is one pass of decide over a filter with at most one state.
func (s *Store) decidePass(ctx context.Context, d catalogdb.Decision, f Filter, extra string, p DecideParams,
	action, outcome, wouldOutcome, set, why string, res *DecideResult) error {
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
			pf := f
			pf.AfterID = last
			var err error
			if refs, err = pageRefs(ctx, tx, pf, extra, n, true); err != nil || len(refs) == 0 {
				return err
			}
			if traces, err = s.messageTraces(ctx, tx, refs); err != nil {
				return err
			}
			ids := make([]string, len(refs))
			args := []any{d.Now().UnixMilli(), d.Actor, why}
			for i, r := range refs {
				ids[i] = r.EventID
				args = append(args, r.ID)
			}
			if p.DryRun {
				return catalogdb.AppendAudit(ctx, tx, d.Record(action, wouldOutcome, true, ids, why))
			}
			if _, err := tx.ExecContext(ctx, `UPDATE lily_dlq_entries SET `+set+` WHERE id IN (`+catalogdb.Placeholders(len(refs))+`)`, args...); err != nil {
				return fmt.Errorf("catalog: %s: %w", action, err)
			}
			if err := removeVersionData(ctx, tx, d.Now().UnixMilli(), args[3:]); err != nil { // edit.go
				return err
			}
			return catalogdb.AppendAudit(ctx, tx, d.Record(action, outcome, false, ids, why))
		})
		if s.tracer != nil && len(refs) > 0 {
			o := outcome
			if p.DryRun {
				o = wouldOutcome
			}
			s.emitSpans(ctx, start, decisionSpans(d, action, o, p.DryRun, refs, traces), err)
		}
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			return nil
		}
		last = refs[len(refs)-1].ID
		res.Count += len(refs)
		if p.OnEntry != nil {
			for _, r := range refs {
				p.OnEntry(r)
			}
		}
	}
	return nil
}

// DefaultRetention is how long a dead letter is kept when its queue's
// retention is not known: dlq_retention_hours' default, 336 hours.
const DefaultRetention = 336 * time.Hour

// ExpireParams are the arguments of Expire.
type ExpireParams struct {
	// Queues limits the expiry to these queues; empty means every queue in
	// the catalog. A consumer passes its own queue.
	Queues []string
	// Retention returns a queue's dlq_retention_hours as a duration. Nil,
	// or a result <= 0, means DefaultRetention.
	Retention func(queue string) time.Duration
	// DryRun lists what would expire and changes nothing (it is audited).
	DryRun bool
	// Actor is who decides. Defaults to DefaultActor().
	Actor string
	// Op is the operation ID for the audit log. Defaults to NewOp.
	Op string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// OnEntry, if set, is called for each entry expired (or that would be).
	OnEntry func(EntryRef)
}

// ExpireResult is what Expire did.
type ExpireResult struct {
	DecideResult
	// ByQueue counts the expired entries of each queue that had any.
	ByQueue map[string]int `json:"by_queue"`
}

// Expire discards, with a record, the held entries dead-lettered longer
// ago than their queue's retention (docs/design.md §9: never silently). Each batch
// is one transaction with its audit record; a run that finds nothing to
// expire writes no audit record, so that it can run periodically — e.g.
// every few minutes from a long-running consumer:
//
//	catalog.Expire(ctx, catalog.ExpireParams{Queues: []string{q.Name},
//		Retention: func(string) time.Duration { return time.Duration(q.DLQRetentionHours) * time.Hour }})
func (s *Store) Expire(ctx context.Context, p ExpireParams) (ExpireResult, error) {
	d := catalogdb.NewDecision(p.Op, p.Actor, "", p.Now)
	out := ExpireResult{DecideResult: DecideResult{Op: d.Op, DryRun: p.DryRun}, ByQueue: map[string]int{}}
	queues := p.Queues
	if len(queues) == 0 {
		var err error
		if queues, err = s.queues(ctx); err != nil {
			return out, err
		}
	}
	now := d.Now()
	for _, q := range queues {
		ret := DefaultRetention
		if p.Retention != nil {
			if r := p.Retention(q); r > 0 {
				ret = r
			}
		}
		cutoff := now.Add(-ret)
		f := Filter{Queue: q, States: HeldStates, DeadLetteredBefore: cutoff}
		qd := d
		qd.Selector = fmt.Sprintf(`{"queue":%q,"states":["pending","parked","needs_manual"],"dead_lettered_before":%q,"dlq_retention_hours":%g}`,
			q, cutoff.UTC().Format(time.RFC3339Nano), ret.Hours())
		why := fmt.Sprintf("retention: dead-lettered more than %s ago (dlq_retention_hours = %g)", ret, ret.Hours())
		dp := DecideParams{DryRun: p.DryRun, OnEntry: p.OnEntry}
		res, err := s.decideQuiet(ctx, qd, f, dp, why)
		out.Count += res
		if res > 0 {
			out.ByQueue[q] = res
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// decideQuiet is decide for expiry: nothing selected writes no record.
func (s *Store) decideQuiet(ctx context.Context, d catalogdb.Decision, f Filter, p DecideParams, why string) (int, error) {
	n, err := s.countMatching(ctx, f, "")
	if err != nil || n == 0 {
		return 0, err
	}
	res, err := s.decide(ctx, d, f, "", p, ActionExpire, OutcomeExpired, OutcomeWouldExpire,
		`state = 'discarded', `+removeData+`, decided_at = ?1, decided_by = ?2, decision = ?3, updated_at = ?1`, why)
	return res.Count, err
}

// countMatching counts the entries matching f and the extra condition.
func (s *Store) countMatching(ctx context.Context, f Filter, extra string) (int64, error) {
	where, args := f.where()
	if extra != "" {
		if where == "" {
			where = " WHERE " + extra
		} else {
			where += " AND " + extra
		}
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_dlq_entries`+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("catalog: count entries: %w", err)
	}
	return n, nil
}

// queues lists the queues that have entries, in order. It walks the
// (queue, state, id) index from one queue to the next — a few index probes
// per queue — instead of a DISTINCT over every entry, which PostgreSQL
// (before version 18: no skip scan) answers by reading the whole table.
func (s *Store) queues(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `WITH RECURSIVE q(queue) AS (
		SELECT MIN(queue) FROM lily_dlq_entries
		UNION ALL
		SELECT (SELECT MIN(e.queue) FROM lily_dlq_entries e WHERE e.queue > q.queue) FROM q WHERE q.queue IS NOT NULL
	) SELECT queue FROM q WHERE queue IS NOT NULL ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("catalog: list queues: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// ref returns e's reference.
func ref(e *Entry) EntryRef {
	return EntryRef{ID: e.ID, Queue: e.Queue, EventID: e.EventID, State: e.State, RedriveCount: e.RedriveCount, DeadLetteredAt: e.DeadLetteredAt}
}
