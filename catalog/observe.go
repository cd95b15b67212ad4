package catalog

import (
	"context"
	"fmt"
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
		refs, err := pageRefs(ctx, s.db, Filter{EventIDs: chunk, AfterID: since}, "", 1<<30, false)
		if err != nil {
			return nil, err
		}
		out = append(out, refs...)
	}
	return out, nil
}
