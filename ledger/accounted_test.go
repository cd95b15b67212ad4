package ledger

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// Accounted does not count a redrive as accepted again.
func TestAccountedRedrive(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		a := Account(nopTransport{}, l)
		msgs := []transport.Message{{EventID: "new"}}
		if err := a.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		if err := a.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "back"}}, Redrive: true}); err != nil {
			t.Fatal(err)
		}
		var accepted int64
		if err := s.DB().QueryRowContext(ctx, `SELECT accepted FROM lily_ledger WHERE queue = 'q'`).Scan(&accepted); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		if accepted != 1 {
			t.Errorf("accepted %d, want 1 (the redrive is not a new message)", accepted)
		}
	})
}

type nopTransport struct{ transport.Transport }

func (nopTransport) Publish(context.Context, *transport.PublishParams) error { return nil }
