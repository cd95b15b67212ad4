package azqueue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestFunctionsPoisonIngestAndRedrive: two messages a Functions-style
// consumer failed five times each were moved to "<queue>-poison" without a
// reason; the ingest takes them into the catalog (catalog commit, then
// delete) with their text byte for byte, the count (maxDequeueCount 5),
// reason delivery_limit and the time they were moved; the redrive sends a
// message's text back to the trigger queue, exactly. Nothing is left in
// the poison queue, and the trigger queue holds the redriven text alone.
func TestFunctionsPoisonIngestAndRedrive(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	queue := fmt.Sprintf("orders-fn-%d", time.Now().UnixNano())
	svc := tr.Service()
	for _, n := range []string{queue, queue + "-poison"} {
		if _, err := svc.CreateQueue(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.DeleteQueue(context.Background(), n, nil) })
	}
	bodies := []string{`{"order":1,"note":"<gift & wrap>"}`, "eyJvcmRlciI6Mn0="} // JSON text, and a base64 text as Functions' default encoding writes
	for _, b := range bodies {
		if _, err := svc.NewQueueClient(queue).EnqueueMessage(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Minute)
	azuritetest.FunctionsRuntime(ctx, t, svc, queue, 5)

	cat := transporttest.TempCatalog(t)
	fn := tr.Functions(queue, 5, "")
	n, err := cat.IngestWith(ctx, fn, catalog.IngestParams{Queue: queue, Foreign: "azure-functions"})
	if err != nil || n != 2 {
		t.Fatalf("ingested %d (%v), want 2", n, err)
	}
	if d, err := fn.DeadLetterDepth(ctx, queue); err != nil || d != 0 {
		t.Errorf("poison queue holds %d after the ingest (%v), want 0", d, err)
	}
	var entries []*catalog.Entry
	if err := cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		entries = append(entries, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d catalog entries, want 2", len(entries))
	}
	got := map[string]*catalog.Entry{}
	for _, e := range entries {
		got[string(e.Body)] = e
	}
	for _, b := range bodies {
		e := got[b]
		if e == nil {
			t.Fatalf("no entry with body %q (bodies kept byte for byte): %v", b, got)
		}
		if e.Reason != string(evidence.ReasonDeliveryLimit) || e.DeliveryCount != 5 || !strings.Contains(e.ErrorMessage, "5 dequeues") ||
			e.Source != "azqueue/"+queue || e.DeadLetteredAt.Before(before) || e.DeadLetteredAt.After(time.Now()) {
			t.Errorf("entry %q: reason %s, count %d, error %q, source %s, dead-lettered at %v; want delivery_limit at 5 dequeues from azqueue/%s, moved just now",
				b, e.Reason, e.DeliveryCount, e.ErrorMessage, e.Source, e.DeadLetteredAt, queue)
		}
		if e.Headers[evidence.HeaderAzureFunctionsQueue] != queue || e.Headers[evidence.HeaderAzureFunctionsInserted] == nil {
			t.Errorf("entry %q: headers %v, want the trigger queue and the insertion time", b, e.Headers)
		}
	}
	// Redrive the first to its trigger queue: its text alone, exactly.
	e := got[bodies[0]]
	if err := fn.Publish(ctx, &transport.PublishParams{Queue: queue, Messages: []transport.Message{{EventID: e.EventID, Body: e.Body, Headers: e.Headers}}, Redrive: true}); err != nil {
		t.Fatal(err)
	}
	one := int32(32)
	peek, err := svc.NewQueueClient(queue).PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: &one})
	if err != nil {
		t.Fatal(err)
	}
	if len(peek.Messages) != 1 || *peek.Messages[0].MessageText != bodies[0] {
		t.Fatalf("trigger queue after the redrive holds %d messages, want exactly the text %q", len(peek.Messages), bodies[0])
	}
	if err := tr.Functions(queue, 5, "no-such-queue-x").Publish(ctx, &transport.PublishParams{Messages: []transport.Message{{Body: []byte("x")}}}); err == nil || !strings.Contains(err.Error(), "no-such-queue-x") {
		t.Errorf("redrive to a missing queue: %v, want an error naming it", err)
	}
}
