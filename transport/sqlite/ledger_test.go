package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// TestLedgerKeepsNoEventRows: the embedded transport's ledger is bounded
// by construction (docs/ledger.md): a message is one row for its whole
// life, its counters are raised in the transactions that insert and
// delete it, and it writes no per-event ledger row — not for a
// publication, a redelivery, a retry or an ack.
func TestLedgerKeepsNoEventRows(t *testing.T) {
	ctx := context.Background()
	tr := open(t, Options{}, "q")
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
	}
	publish(t, tr, "q", ids...)
	acked := 0
	for round := 0; acked < len(ids); round++ {
		if round > 10 {
			t.Fatalf("only %d of %d acked after 10 rounds", acked, len(ids))
		}
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: 50, Consumer: "c"})
		if err != nil {
			t.Fatal(err)
		}
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			// Every fourth message of the first round is released (a
			// redelivery follows); the rest are acked.
			if round == 0 && i%4 == 0 {
				ss[i] = transport.Settlement{Delivery: d, Action: transport.Release}
				continue
			}
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
			acked++
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := tr.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_ledger_events`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d per-event ledger rows, want 0", rows)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Accepted != 200 || ls[0].Acked != 200 || !ls[0].Balanced() {
		t.Errorf("ledger %+v, want q with 200 accepted and acked, balanced", ls)
	}
}
