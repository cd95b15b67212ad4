package ledger

import (
	"context"
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
		rows, err := l.Rows(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var accepted int64
		for _, r := range rows {
			if r.Queue == "q" {
				accepted = r.Accepted
			}
		}
		if accepted != 1 {
			t.Errorf("accepted %d, want 1 (the redrive is not a new message)", accepted)
		}
	})
}

type nopTransport struct{ transport.Transport }

func (nopTransport) Publish(context.Context, *transport.PublishParams) error { return nil }

func (nopTransport) Settle(context.Context, *transport.SettleParams) error { return nil }
