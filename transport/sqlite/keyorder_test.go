package sqlite

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
)

// TestKeyOrder: with KeyOrder a keyed message is handed out only when no
// older message of its key is left in the queue — leased (to a consumer
// that may have died), or delayed — while other keys and keyless messages
// flow.
func TestKeyOrder(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Second}, "q")
	msgs := []transport.Message{
		{EventID: "k1", Key: "K"}, {EventID: "j1", Key: "J"}, {EventID: "k2", Key: "K"},
		{EventID: "n1"}, {EventID: "j2", Key: "J"}, {EventID: "k3", Key: "K"},
	}
	for i := range msgs {
		msgs[i].Body = []byte(msgs[i].EventID)
	}
	if err := tr.Publish(context.Background(), &transport.PublishParams{Queue: "q", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	p := transport.ReceiveParams{Max: 10, KeyOrder: true, Consumer: "dies"}
	first := receive(t, tr, p)
	if got, want := summary(first), []string{"k1/1", "j1/1", "n1/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first receive = %v, want %v (the oldest of each key, and the keyless)", got, want)
	}
	// The consumer holding k1 and j1 dies; another one finds nothing of K
	// or J to take while their heads are leased.
	p.Consumer = "next"
	if got := summary(receive(t, tr, p)); len(got) != 0 {
		t.Fatalf("receive while the heads are leased = %v, want nothing", got)
	}
	// Without KeyOrder the later messages would have gone out.
	clk.Advance(1100 * time.Millisecond) // the dead consumer's leases expire
	second := receive(t, tr, p)
	if got, want := summary(second), []string{"k1/2", "j1/2", "n1/2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the lease expired = %v, want %v", got, want)
	}
	acked := map[string]bool{}
	ack := func(ds ...*transport.Delivery) {
		t.Helper()
		var ss []transport.Settlement
		for _, d := range ds {
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			acked[d.EventID] = true
		}
		if err := tr.Settle(context.Background(), &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
	}
	ack(second[0], second[2]) // k1 and n1 done, j1 still held
	third := receive(t, tr, p)
	if got, want := summary(third), []string{"k2/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after k1 = %v, want %v", got, want)
	}
	ack(second[1])
	fourth := receive(t, tr, p)
	if got, want := summary(fourth), []string{"j2/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after j1 = %v, want %v (k3 waits for k2)", got, want)
	}
	ack(third...)
	ack(fourth...)
	last := receive(t, tr, p)
	if got, want := summary(last), []string{"k3/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after k2 = %v, want %v", got, want)
	}
	ack(last...)
	// Conservation: every published message acked once, none left, none invented.
	for _, m := range msgs {
		if !acked[m.EventID] {
			t.Errorf("%s was never acked", m.EventID)
		}
	}
	if len(acked) != len(msgs) {
		t.Errorf("acked %d distinct messages, want %d", len(acked), len(msgs))
	}
	if n := inFlight(t, tr, "q"); n != 0 {
		t.Errorf("in flight at the end: %d, want 0", n)
	}
}
