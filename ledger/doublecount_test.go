package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// lostAck is a broker whose first acknowledgement never arrives (the
// consumer's channel died after the ledger counted it); everything else
// goes through.
type lostAck struct {
	nopTransport
	lost bool
}

func (b *lostAck) Settle(_ context.Context, p *transport.SettleParams) error {
	for _, s := range p.Settlements {
		if s.Action == transport.Ack && !b.lost {
			b.lost = true
			return errors.New("injected: the channel died before the ack reached the broker")
		}
	}
	return nil
}

// none is a broker with nothing in flight any more.
type none struct{}

func (none) InFlight(context.Context, string) (int64, error) { return 0, nil }

// TestAckedThenDeadLetteredCountsTwice pins the accepted limit spin found
// in the ledger (docs/design.md §14.5, models/ledger.pml "limit: STRICT
// balance"): acked is counted before the broker ack; when that ack is lost
// and the redelivery is dead-lettered, the message is counted acked and
// dead-lettered for good, lost = −1 (counted twice, never a loss hidden).
// If this test fails because the ledger balances, the limit is closed:
// update §14.5 and the model's limit line.
func TestAckedThenDeadLetteredCountsTwice(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		b := &lostAck{}
		a := Account(b, l)
		m := transport.Message{EventID: "twice", Body: []byte("order 7")}
		if err := a.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{m}}); err != nil {
			t.Fatal(err)
		}
		d := &transport.Delivery{Message: m, Queue: "q", DeliveryCount: 1}
		if err := a.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err == nil {
			t.Fatal("the first ack went through; the test needs it lost")
		}
		// The broker redelivers it; this time the handler fails for good.
		d2 := &transport.Delivery{Message: m, Queue: "q", DeliveryCount: 2}
		if err := a.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d2, Action: transport.DeadLetter, Reason: "permanent"}}}); err != nil {
			t.Fatal(err)
		}
		// Ingest stores the dead letter in the catalog.
		if err := s.Insert(ctx, catalog.NewEntry("q", m, nil, "permanent", time.Now())); err != nil {
			t.Fatal(err)
		}
		rows, err := l.Rows(ctx, none{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue != "q" {
				continue
			}
			if r.Accepted != 1 || r.Acked != 1 || r.DeadLettered != 1 || r.Lost != -1 {
				t.Fatalf("row %+v: want accepted 1, acked 1, dead_lettered 1, lost -1 (event twice counted twice)", r)
			}
			return
		}
		t.Fatalf("no ledger row for queue q in %+v", rows)
	})
}
