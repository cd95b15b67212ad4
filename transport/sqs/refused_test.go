package sqs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOversizedDeadLetterStoredInCatalog (issue 30, item 2, on SQS): SQS
// refuses a message over 256 KiB, body and attributes together; a large
// original with its evidence attributes is over it. Through ledger.Accounted
// such a dead letter is stored in the catalog — full evidence, original
// body, x-lily-dlq-refused naming the limit — and the original deleted;
// its small neighbour goes to "<queue>-dlq" as usual, and a healthy message
// settled in the same call is acked; the ledger balances.
// (goaws checks the body alone, so on the emulator the old code "sent"
// the copy to the DLQ, where real SQS refuses it: this test fails there
// on the missing entry.)
func TestOversizedDeadLetterStoredInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The test settles by hand what it received, possibly over several
	// receives: a lease of the default 30 s, not the suite's 3 s, so that a
	// starved machine does not let a message come back before its settle
	// (a stress run saw the delete of an expired receipt answered 404).
	tr := open(t, func(o *sqs.Options) { o.VisibilityTimeout = sqs.DefaultVisibilityTimeout })
	cat := transporttest.TempCatalog(t)
	acc := ledger.Account(tr, ledger.New(cat))
	queue := fmt.Sprintf("refused-%d", time.Now().UnixNano())
	qc := lily.QueueConfig{Name: queue, Transport: "sqs"}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("b", sqs.MaxMessageSize-8000) // fits alone, not with 10 KB of evidence
	msgs := []lily.Message{{Body: []byte(big)}, {Body: []byte("small")}, {Body: []byte("healthy")}}
	if err := lily.Publish(ctx, acc, queue, msgs); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	transporttest.WaitFor(t, "every message received", func() bool {
		got, err := acc.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 3, Wait: 100 * time.Millisecond, Consumer: "refused"})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
		return len(ds) == len(msgs)
	})
	stack := strings.Repeat("main.handler()\n\t/src/main.go:42\n", 300)
	var ss []transport.Settlement
	for _, d := range ds {
		if string(d.Body) == "healthy" {
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			continue
		}
		h := transport.CloneHeaders(d.Headers)
		if h == nil {
			h = transport.Headers{}
		}
		h[evidence.HeaderReason] = string(evidence.ReasonPermanent)
		h[evidence.HeaderErrorMessage] = "permanent: too big to handle"
		h[evidence.HeaderErrorStack] = stack
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Reason: string(evidence.ReasonPermanent), Headers: h})
	}
	stored := map[string]string{}
	if err := acc.Settle(ctx, &transport.SettleParams{Settlements: ss, OnStored: func(i int, why string) { stored[ds[i].EventID] = why }}); err != nil {
		t.Fatalf("settle: %v, want all applied (one through the catalog)", err)
	}
	if len(stored) != 1 || !strings.Contains(stored[msgs[0].EventID], "size limit") {
		t.Fatalf("stored in the catalog: %v, want %s alone, for the size limit", stored, msgs[0].EventID)
	}
	es, err := cat.List(ctx, catalog.Filter{Queue: queue}, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("%d entries (%v), want the oversized dead letter", len(es), err)
	}
	e := es[0]
	note, _ := e.Headers[evidence.HeaderDLQRefused].(string)
	if e.EventID != msgs[0].EventID || string(e.Body) != big || e.Headers[evidence.HeaderErrorStack] != stack || !strings.Contains(note, "size limit") ||
		e.Reason != string(evidence.ReasonPermanent) || e.ErrorMessage != "permanent: too big to handle" {
		t.Errorf("entry %s: body %d bytes, stack kept %v, reason %q, error %q, note %q: want the original, the full evidence and why",
			e.EventID, len(e.Body), e.Headers[evidence.HeaderErrorStack] == stack, e.Reason, e.ErrorMessage, note)
	}
	if n := sqstest.Depth(sqs.DeadLetterQueue(queue)); n != 1 {
		t.Errorf("DLQ holds %d, want the small neighbour alone", n)
	}
	if _, err := cat.Ingest(ctx, acc, queue); err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(cat).Rows(ctx, acc)
	if want := (ledger.Row{Queue: queue, Accepted: 3, Acked: 1, DeadLettered: 2}); err != nil || len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v (%v), want %+v", rows, err, want)
	}
}
