package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
)

// pubsubConfig writes a configuration with one pubsub queue on the fake at
// addr.
func pubsubConfig(t *testing.T, db, addr, queue string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lily.toml")
	body := fmt.Sprintf(`db = %q
pubsub_project = "lily-cli"
pubsub_endpoint = %q
pubsub_insecure = true

[[queue]]
name = %q
transport = "pubsub"
retry_attempts = 1
retry_backoff_millis = 1000
delivery_limit = 3
`, db, addr, queue)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPubSubTopologyIngestRedrive: 'lily topology plan/apply/verify' on
// pstest (the dead-letter topic gets its own subscription, the main one a
// dead-letter policy above delivery_limit); a message whose retries ran
// out is dead-lettered by Lily; 'lily dlq ingest' drains it into the
// catalog once; 'lily dlq redrive' sends it back to the subscription's
// retry-return topic (never the source topic, which every subscription
// reads) with its event ID and attributes, retry count reset, redrive
// count 1.
func TestPubSubTopologyIngestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	db := filepath.Join(t.TempDir(), "catalog.db")
	queue := "orders.created"
	cfg := pubsubConfig(t, db, srv.Addr, queue)

	code, out, errOut := run(t, "topology", "plan", "--config", cfg)
	if code != 0 || !strings.Contains(out, "orders.created.dlt") || !strings.Contains(out, "orders.created.dlt after 5 attempts") ||
		!strings.Contains(out, "orders.created.retry.1000ms") {
		t.Fatalf("plan: exit %d %s\n%s", code, errOut, out)
	}
	if code, out, _ := run(t, "topology", "verify", "--config", cfg); code != 1 || !strings.Contains(out, "missing") {
		t.Fatalf("verify before apply: exit %d\n%s", code, out)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg, "--json"); code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("verify after apply: exit %d %s\n%s", code, errOut, out)
	}

	c, err := config.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	qc, _ := c.Queue(queue)
	b := brokers.New(c, brokers.Options{})
	t.Cleanup(b.Close)
	ps, err := b.PubSub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps.Register(qc.Spec())
	msgs := []lily.Message{{Body: []byte("ok-1")}, {Body: []byte("ok-2")},
		{EventID: "evt-bad", Type: "order.created", Body: []byte("bad"), Headers: lily.Headers{"source-system": "till-42"}}}
	if err := lily.Publish(ctx, ps, queue, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked, dead := 0, 0
	hook := lily.HookFunc(func(_ context.Context, ev lily.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Kind {
		case lily.EventAcked:
			acked++
		case lily.EventDeadLettered:
			dead++
		}
	})
	cons, err := lily.NewConsumer(ps, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "bad" {
			return fmt.Errorf("inventory service: 503")
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Hooks: []lily.Hook{hook}, ReceiveWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx) }()
	waittest.For(t, "two acks and one dead letter", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked == 2 && dead == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for i, want := range []int{1, 0} {
		code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
		var res ingestJSON
		mustJSON(t, out, &res)
		if code != 0 || res.Total != want {
			t.Errorf("ingest %d: exit %d %s %+v, want %d", i+1, code, errOut, res, want)
		}
	}
	code, out, errOut = run(t, "dlq", "show", "1", "--config", cfg, "--json")
	var e entryJSON
	mustJSON(t, out, &e)
	if code != 0 || e.EventID != "evt-bad" || e.Reason != "retries_exhausted" || e.RetryCount != 1 || !strings.Contains(e.ErrorMessage, "inventory service: 503") {
		t.Fatalf("show: exit %d %s %+v", code, errOut, e)
	}
	perTopic := func() map[string]int {
		out := map[string]int{}
		for _, m := range srv.Messages() {
			out[strings.TrimPrefix(m.Topic, "projects/lily-cli/topics/")]++
		}
		return out
	}
	before := perTopic()
	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--json")
	var rr redriveJSON
	mustJSON(t, out, &rr)
	if code != 0 || rr.Redriven != 1 {
		t.Fatalf("redrive: exit %d %s %+v", code, errOut, rr)
	}
	after := perTopic()
	for topic, n := range after {
		if want := before[topic] + boolToInt(topic == pubsub.ReturnTopic(queue)); n != want {
			t.Errorf("%s holds %d messages after the redrive, %d before: want one more on %s alone", topic, n, before[topic], pubsub.ReturnTopic(queue))
		}
	}
	var got []*transport.Delivery
	waittest.For(t, "the redriven message in the queue's subscriptions", func() bool {
		ds, err := ps.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 10, Consumer: "check"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
		return len(got) > 0
	})
	red := got[0]
	if len(got) != 1 || red.EventID != "evt-bad" || red.Type != "order.created" || string(red.Body) != "bad" || red.DeliveryCount != 1 {
		t.Fatalf("redriven %d messages, first %+v", len(got), red.Message)
	}
	if evidence.RedriveCount(red.Headers) != 1 || red.Headers["source-system"] != "till-42" {
		t.Errorf("redriven headers %v: want redrive count 1 and the original attributes", red.Headers)
	}
	if n, ok := red.Headers[evidence.HeaderRetryCount]; ok && n != int32(0) {
		t.Errorf("redriven x-retry-count %v, want reset", n)
	}
	if err := ps.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: red, Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
}

// TestEvidenceDecodePubSub: 'lily evidence decode' reads the attributes
// Pub/Sub's dead-letter policy adds.
func TestEvidenceDecodePubSub(t *testing.T) {
	t.Parallel()
	in := `{"CloudPubSubDeadLetterSourceSubscription":"orders-worker","CloudPubSubDeadLetterSourceDeliveryCount":"7","tenant":"acme"}`
	var out, errb strings.Builder
	cmd := newRoot()
	cmd.SetArgs([]string{"evidence", "decode"})
	cmd.SetIn(strings.NewReader(in))
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("evidence decode: %v %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "pubsub CloudPubSubDeadLetterSource*: reason max_delivery_attempts, at orders-worker, count 7") {
		t.Errorf("decode printed:\n%s", out.String())
	}
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pstestMu serializes reads of pstest's records: Server.Messages refreshes
// the Acks of the same *Message values it returned before.
var pstestMu sync.Mutex

// pstestCounter is a Pub/Sub transport on srv whose InFlight counts a
// queue's messages not acknowledged in pstest's records — those of its
// topic, its retry-return topic and its delay topics, not its dead-letter
// topic — for a test's ledger reads (the Pub/Sub API itself cannot count).
func pstestCounter(t *testing.T, srv *pstest.Server) transport.InFlightCounter {
	t.Helper()
	count := func(_ context.Context, _ string, n pubsub.QueueNames) (int64, error) {
		pstestMu.Lock()
		defer pstestMu.Unlock()
		prefix := "projects/lily-cli/topics/"
		var c int64
		for _, m := range srv.Messages() {
			topic := strings.TrimPrefix(m.Topic, prefix)
			if (topic == n.Topic || topic == pubsub.ReturnTopic(n.Subscription) || strings.HasPrefix(topic, n.Subscription+".retry.")) && m.Acks == 0 {
				c++
			}
		}
		return c, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := pubsub.Open(ctx, pubsub.Options{Project: "lily-cli", Endpoint: srv.Addr, Insecure: true, InFlight: count})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}
