package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// LastID returns the highest entry ID, 0 for an empty catalog: entries
// added later have higher IDs.
func (s *Store) LastID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM lily_dlq_entries`).Scan(&id); err != nil {
		return 0, fmt.Errorf("catalog: last ID: %w", err)
	}
	return id, nil
}

// Returned returns the entries added after the entry ID since whose event
// IDs are among eventIDs: messages dead-lettered again after a redrive.
func (s *Store) Returned(ctx context.Context, since int64, eventIDs []string) ([]EntryRef, error) {
	var out []EntryRef
	for start := 0; start < len(eventIDs); start += decisionBatch {
		chunk := eventIDs[start:min(start+decisionBatch, len(eventIDs))]
		refs, err := pageRefs(ctx, s.db, Filter{EventIDs: chunk, AfterID: since}, "", 1<<30)
		if err != nil {
			return nil, err
		}
		out = append(out, refs...)
	}
	return out, nil
}

// ObserveParams are the arguments of Observe.
type ObserveParams struct {
	// Since is the entry ID watermark taken before the redrive (LastID).
	Since int64
	// EventIDs are the redriven messages to watch.
	EventIDs []string
	// Window is how long to watch.
	Window time.Duration
	// Poll is the pause between looks. Defaults to 200ms.
	Poll time.Duration
	// Tick, if set, runs before each look: e.g. ingesting a broker's DLQ
	// so that its dead letters reach the catalog.
	Tick func(ctx context.Context) error
}

// Observe watches redriven messages for Window: it returns as soon as any
// of them is dead-lettered again (a new catalog entry with its event ID),
// or nil entries when the window passed without one.
func (s *Store) Observe(ctx context.Context, p ObserveParams) ([]EntryRef, error) {
	poll := p.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	deadline := time.Now().Add(p.Window)
	for {
		if p.Tick != nil {
			if err := p.Tick(ctx); err != nil {
				return nil, fmt.Errorf("observe: %w", err)
			}
		}
		back, err := s.Returned(ctx, p.Since, p.EventIDs)
		if err != nil || len(back) > 0 {
			return back, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(poll, left)):
		}
	}
}

// describeRefs lists up to n event IDs of refs for a message.
func describeRefs(refs []EntryRef, n int) string {
	var parts []string
	for i, r := range refs {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(refs)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (entry %d, %s)", r.EventID, r.ID, r.Queue))
	}
	return strings.Join(parts, ", ")
}

// RecordObservation audits the outcome of watching a redrive sample
// (ObserveParams.EventIDs) for window under operation op: clean, or
// stopped because the entries back were dead-lettered again. For the
// latter it returns the error to report.
func (s *Store) RecordObservation(ctx context.Context, op, actor string, sampled []string, window time.Duration, back []EntryRef) error {
	d := newDecision(op, actor, fmt.Sprintf(`{"observe":%q}`, window.String()), nil)
	if len(back) == 0 {
		return s.AppendAudit(context.WithoutCancel(ctx), d.record(ActionRedrive, OutcomeObserved, false, sampled,
			fmt.Sprintf("none of the %d sampled messages was dead-lettered again within %s", len(sampled), window)))
	}
	ids := make([]string, len(back))
	for i, r := range back {
		ids[i] = r.EventID
	}
	detail := "sampled messages were dead-lettered again within " + window.String() + ": " + describeRefs(back, 10) +
		"; the rest of the selection was not redriven"
	if err := s.AppendAudit(context.WithoutCancel(ctx), d.record(ActionRedrive, OutcomeStopped, false, ids, detail)); err != nil {
		return err
	}
	return errors.New("redrive stopped: " + detail)
}
