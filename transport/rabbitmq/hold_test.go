package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestFullDeadLetterQueueHoldsOriginals: without a catalog (the plain
// transport, no ledger.Accounted to store a refused dead letter in), with
// dlq_max_length = 3 and eight permanent failures, the DLQ refuses four or
// five copies (reject-publish). Their originals stay held — not released
// into the broker's delivery limit — and their copies go through as `lily
// dlq ingest` makes room: every entry ends with Lily's evidence (reason
// permanent, the handler's error), the refused ones say that the DLQ was
// full, and each handler ran once.
func TestFullDeadLetterQueueHoldsOriginals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs transporttest.SyncBuffer
	tr := openWith(t, rabbitmq.Options{RefusedBackoff: 20 * time.Millisecond, RefusedBackoffMax: 200 * time.Millisecond,
		Logger: slogTo(&logs)})
	defer tr.Close()
	qc := randomQueue("hold.dlqfull", lily.QueueConfig{DLQMaxLength: new(int64(3))})
	declared(t, tr, qc)
	cat := tempCatalog(t)
	const n = 8
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("bad-%d", i))
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		calls[d.EventID]++
		mu.Unlock()
		return lily.Permanent(errors.New("schema violation in " + string(d.Body)))
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Logger: quiet(),
		// One hand-off at a time: RabbitMQ 3.10's reject-publish on a
		// quorum queue is soft — it takes one message over the limit, and
		// publishes racing each other before the queue tells their channel
		// it is full are taken too — so concurrent hand-offs would make
		// the number refused vary from run to run.
		Concurrency: 1, SettleBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	// Every handler runs; the DLQ fills up (one over its max-length: the
	// broker's limit is soft); the refused originals stay held, nothing is
	// released, and the consumer stops taking more: the settle slots wait.
	transporttest.WaitFor(t, "a full DLQ and the refused originals held", func() bool {
		dl, err := tr.DeadLetterDepth(ctx, qc.Name)
		mu.Lock()
		ran, rerun := len(calls), 0
		for _, k := range calls {
			rerun += k - 1
		}
		mu.Unlock()
		// (A handler that runs again means the refused originals were
		// released: the test goes on, to show what became of them.)
		return err == nil && ran == n && dl >= 3 && (strings.Contains(logs.String(), "holding the originals") || rerun > 0)
	})
	// An operator ingests; the held copies go through as room appears.
	transporttest.WaitFor(t, "all eight in the catalog", func() bool {
		if _, err := cat.Ingest(ctx, tr, qc.Name); err != nil {
			t.Fatal(err)
		}
		es, err := cat.List(ctx, catalog.Filter{Queue: qc.Name}, 0)
		return err == nil && len(es) == n
	})
	stop()
	es, err := cat.List(ctx, catalog.Filter{Queue: qc.Name}, 0)
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, e := range es {
		if e.Reason != string(evidence.ReasonPermanent) || !strings.Contains(e.ErrorMessage, "schema violation") {
			t.Errorf("entry %s: reason %q error %q, want Lily's evidence (permanent, the handler's error)", e.EventID, e.Reason, e.ErrorMessage)
		}
		if note, _ := e.Headers[rabbitmq.HeaderDLQFull].(string); note != "" {
			full++
			if !strings.Contains(note, "was full") {
				t.Errorf("entry %s: %s = %q", e.EventID, rabbitmq.HeaderDLQFull, note)
			}
		}
	}
	refused := 0
	for _, m := range regexp.MustCompile(`hand-offs refused.* refused=(\d+)`).FindAllStringSubmatch(logs.String(), -1) {
		k, _ := strconv.Atoi(m[1])
		refused += k
	}
	if refused == 0 || full != refused {
		t.Errorf("%d entries say the DLQ was full; the log reports %d refused hand-offs: want the same, and some", full, refused)
	}
	for _, m := range msgs {
		if calls[m.EventID] != 1 {
			t.Errorf("handler ran %d times for %s, want once: its outcome was decided", calls[m.EventID], m.Body)
		}
	}
	if !strings.Contains(logs.String(), "holding the originals") {
		t.Errorf("the log does not say the originals were held:\n%s", logs.String())
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("broker DLQ depth %d (%v) after the ingest, want 0: every dead letter is in the catalog", n, err)
	}
}
