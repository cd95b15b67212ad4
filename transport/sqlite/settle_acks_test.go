package sqlite

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
)

// One Settle call with acks of deliveries of different receive counts,
// stale receipts of an earlier lease, an ack given twice, and an ack
// followed by a release of the same delivery: each ack is fenced by its own
// receipt, in the order given. (Written for a batched DELETE of the acks,
// tried twice and not kept: see the history of docs/benchmarks.md, commits
// 354227c and 116b84b.)
func TestAcksAcrossReceiveCounts(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Minute}, "q")
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = "m" + strconv.Itoa(i)
	}
	publish(t, tr, "q", ids...)
	stale := receive(t, tr, transport.ReceiveParams{Max: 5, Consumer: "a"}) // m0..m4, count 1
	clk.Advance(2 * time.Minute)                                            // their leases run out
	ds := receive(t, tr, transport.ReceiveParams{Max: 10, Consumer: "b"})
	if len(ds) != 10 {
		t.Fatalf("received %d, want 10", len(ds))
	}
	for _, d := range ds { // m5..m9 first (visible since the publish), then m0..m4
		n, _ := strconv.Atoi(d.EventID[1:])
		if want := 1 + btoi(n < 5); d.DeliveryCount != want {
			t.Fatalf("%s: delivery count %d, want %d", d.EventID, d.DeliveryCount, want)
		}
	}
	var ss []transport.Settlement
	wantLost := map[int]bool{}
	ack := func(d *transport.Delivery, lost bool) {
		if lost {
			wantLost[len(ss)] = true
		}
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
	}
	ack(stale[0], true) // a's receipt: the row carries count 2 now (ds has both counts)
	for i, d := range ds[:9] {
		ack(d, false)
		if i == 3 {
			ack(stale[1], true)
		}
	}
	ack(ds[2], true) // acked twice in one call
	// m9: acked, then released in the same call; the ack comes first.
	ack(ds[9], false)
	wantLost[len(ss)] = true
	ss = append(ss, transport.Settlement{Delivery: ds[9], Action: transport.Release})

	errs := transport.SettleErrors(settle(tr, ss...), len(ss))
	for i, err := range errs {
		if wantLost[i] != errors.Is(err, transport.ErrLeaseLost) || (!wantLost[i] && err != nil) {
			t.Errorf("settlement %d (%s %s, count %d): %v", i, ss[i].Action, ss[i].Delivery.EventID, ss[i].Delivery.DeliveryCount, err)
		}
	}
	if got := inFlight(t, tr, "q"); got != 0 {
		t.Errorf("in flight = %d, want 0", got)
	}
	if r := ledgerOf(t, tr)["q"]; r.Acked != 10 {
		t.Errorf("ledger %+v, want 10 acked", r)
	}
	conserved(t, tr, "q")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
