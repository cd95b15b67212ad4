package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestCombinedAcksSkipUnsettled settles a batch whose acknowledgements have
// gaps — deliveries handed out but not settled, and deliveries received but
// not yet handed out — then abandons the consumer: exactly the unsettled
// ones must come back, so a combined (multiple) ack never covered them.
func TestCombinedAcksSkipUnsettled(t *testing.T) {
	ctx := context.Background()
	qc := randomQueue("settle.multiack", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	msgs := make([]lily.Message, 12)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprint(i))
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	// Receive 8 of the 12; the broker pushes the rest (prefetch 16), so
	// they wait in the transport, received but not handed out.
	var ds []*transport.Delivery
	for len(ds) < 8 {
		got, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 8 - len(ds), Wait: time.Second,
			Consumer: "multiack-1", Prefetch: 16})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	// Settle 0, 1, 3, 4, 6 (ack or dead-letter); leave 2, 5 and 7 unsettled.
	settled := map[string]bool{}
	var ss []transport.Settlement
	for _, i := range []int{4, 0, 6, 1, 3} {
		a := transport.Ack
		if i == 3 {
			a = transport.DeadLetter
		}
		ss = append(ss, transport.Settlement{Delivery: ds[i], Action: a, Reason: "permanent"})
		settled[ds[i].EventID] = true
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}
	// Settling one again is a lost lease, not a second ack.
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss[:1]}); err == nil {
		t.Error("a second ack of a settled delivery succeeded")
	}
	if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "multiack-1"}); err != nil {
		t.Fatal(err)
	}
	var back []string
	transporttest.WaitWithin(t, 20*time.Second, "the 7 unsettled messages back", func() (bool, string) {
		got, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 16, Wait: 200 * time.Millisecond,
			Consumer: "multiack-2", Prefetch: 16})
		if err != nil {
			t.Fatal(err)
		}
		var acks []transport.Settlement
		for _, d := range got {
			back = append(back, d.EventID)
			acks = append(acks, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: acks}); err != nil {
			t.Fatal(err)
		}
		return len(back) >= 7, fmt.Sprintf("%d back", len(back))
	})
	var want []string
	for _, m := range msgs {
		if !settled[m.EventID] {
			want = append(want, m.EventID)
		}
	}
	slices.Sort(back)
	slices.Sort(want)
	if !slices.Equal(back, want) {
		t.Fatalf("came back %d messages %v, want the 7 unsettled %v", len(back), back, want)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 1 {
		t.Errorf("dead-letter queue holds %d (%v), want 1", n, err)
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}

// TestHandOffOfVoidReceiptMakesNoCopy: once a consumer's channel has died,
// the broker requeues what it held and redelivers it; a retry or
// dead-letter hand-off of such a receipt must fail with ErrLeaseLost before
// publishing anything — a copy would be a duplicate of the redelivered
// original. The redelivered messages are then acked, and the ledger
// balances with nothing dead-lettered.
func TestHandOffOfVoidReceiptMakesNoCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("settle.void", lily.QueueConfig{RetryAttempts: 1, RetryBackoffMillis: new(int64(50))})
	tr := openDeclared(t, qc)
	cat := tempCatalog(t)
	acc := ledger.Account(tr, ledger.New(cat))
	msgs := []lily.Message{{Body: []byte("to retry")}, {Body: []byte("to dead-letter")}}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	for len(ds) < 2 {
		got, err := acc.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 2, Wait: time.Second, Consumer: "void-1"})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	// The channel dies (as when the connection drops): the broker requeues.
	if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "void-1"}); err != nil {
		t.Fatal(err)
	}
	ss := []transport.Settlement{
		{Delivery: ds[0], Action: transport.Retry, Delay: 50 * time.Millisecond, Headers: transport.Headers{evidence.HeaderRetryCount: int32(1)}},
		{Delivery: ds[1], Action: transport.DeadLetter, Reason: "permanent", Headers: transport.Headers{evidence.HeaderReason: "permanent"}},
	}
	errs := transport.SettleErrors(acc.Settle(ctx, &transport.SettleParams{Settlements: ss}), len(ss))
	for i, err := range errs {
		if !errors.Is(err, transport.ErrLeaseLost) {
			t.Errorf("%s of a void receipt: %v, want ErrLeaseLost", ss[i].Action, err)
		}
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("dead-letter queue holds %d (%v): a copy of a requeued original was published", n, err)
	}
	if n, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.BucketQueue(qc.Name, 50)}); err != nil || len(n) != 0 {
		t.Errorf("retry bucket holds %d (%v): a copy of a requeued original was published", len(n), err)
	}
	// The originals come back; acked, the ledger balances.
	back := 0
	transporttest.WaitFor(t, "the requeued originals", func() bool {
		got, err := acc.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 2, Wait: 100 * time.Millisecond, Consumer: "void-2"})
		if err != nil {
			t.Fatal(err)
		}
		var acks []transport.Settlement
		for _, d := range got {
			acks = append(acks, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
		if err := acc.Settle(ctx, &transport.SettleParams{Settlements: acks}); err != nil {
			t.Fatal(err)
		}
		back += len(got)
		return back >= 2
	})
	transporttest.WaitFor(t, "an empty queue", func() bool {
		n, err := acc.InFlight(ctx, qc.Name)
		return err == nil && n == 0
	})
	rows, err := ledger.New(cat).Rows(ctx, acc)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Row{Queue: qc.Name, Accepted: 2, Acked: 2}
	if len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v, want %+v", rows, want)
	}
}
