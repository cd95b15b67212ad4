package sqlite

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
)

// TestExtendLeases: an extended lease outlives the visibility timeout it
// was taken with; a receipt whose lease ran out and was taken by another
// consumer cannot be extended (ErrLeaseLost), alone.
func TestExtendLeases(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Second}, "q")
	publish(t, tr, "q", "a", "b")
	ds := receive(t, tr, transport.ReceiveParams{Consumer: "A", Max: 2})
	if got := summary(ds); !reflect.DeepEqual(got, []string{"a/1", "b/1"}) {
		t.Fatalf("receive = %v", got)
	}
	clk.Advance(800 * time.Millisecond)
	if err := tr.ExtendLeases(context.Background(), &transport.ExtendParams{Consumer: "A", Deliveries: ds[:1]}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(400 * time.Millisecond) // a's lease: extended to 1.8s; b's ran out at 1s
	got := receive(t, tr, transport.ReceiveParams{Consumer: "B", Max: 2})
	if s := summary(got); !reflect.DeepEqual(s, []string{"b/2"}) {
		t.Fatalf("after 1.2s: %v, want only b (a's lease was extended)", s)
	}
	err := tr.ExtendLeases(context.Background(), &transport.ExtendParams{Consumer: "A", Deliveries: ds})
	errs := transport.SettleErrors(err, 2)
	if errs[0] != nil || !errors.Is(errs[1], transport.ErrLeaseLost) {
		t.Fatalf("extending a and a lost b: %v, want a extended and b lease lost", errs)
	}
	if err := tr.Settle(context.Background(), &transport.SettleParams{Settlements: []transport.Settlement{
		{Delivery: ds[0], Action: transport.Ack}, {Delivery: got[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	conserved(t, tr, "q")
}

// TestUnreceive: a leased delivery no handler saw goes back visible at
// once with its receive count as before; its old receipt is void.
func TestUnreceive(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Minute}, "q")
	publish(t, tr, "q", "a", "b")
	ds := receive(t, tr, transport.ReceiveParams{Consumer: "A", Max: 2})
	if err := tr.Unreceive(context.Background(), &transport.UnreceiveParams{Consumer: "A", Deliveries: ds[1:]}); err != nil {
		t.Fatal(err)
	}
	got := receive(t, tr, transport.ReceiveParams{Consumer: "B", Max: 2})
	if s := summary(got); !reflect.DeepEqual(s, []string{"b/1"}) {
		t.Fatalf("after giving b back: %v, want b with count 1, at once", s)
	}
	if err := tr.Unreceive(context.Background(), &transport.UnreceiveParams{Consumer: "A", Deliveries: ds[1:]}); !errors.Is(transport.SettleErrors(err, 1)[0], transport.ErrLeaseLost) {
		t.Fatalf("giving b back again from A: %v, want lease lost (B holds it)", err)
	}
	if err := tr.Settle(context.Background(), &transport.SettleParams{Settlements: []transport.Settlement{
		{Delivery: ds[0], Action: transport.Ack}, {Delivery: got[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	conserved(t, tr, "q")
}
