package entryview

import (
	"context"

	"github.com/lily-mq/lily/catalog"
)

// AddTriage sets v.Triage to e's triage (its own and its group's), left
// nil when neither has a record.
func AddTriage(ctx context.Context, st *catalog.Store, v *Entry, e *catalog.Entry) error {
	t, err := st.EntryTriage(ctx, e)
	if err != nil {
		return err
	}
	if t.Entry != nil || t.Group != nil {
		v.Triage = &t
	}
	return nil
}
