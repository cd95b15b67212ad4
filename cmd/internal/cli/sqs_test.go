package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
)

// sqsConfig writes a configuration with one sqs queue on the in-process
// emulator.
func sqsConfig(t *testing.T, db, queue, extra string) string {
	t.Helper()
	e, err := sqstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	return writeConfig(t, fmt.Sprintf("db = %q\nsqs_endpoint = %q\nsqs_protocol = \"query\"\nsqs_visibility_timeout_seconds = 2\n\n[[queue]]\nname = %q\ntransport = \"sqs\"\ndelivery_limit = 2\n%s\n",
		db, e.URL(), queue, extra))
}

// TestSQSTopologyIngestRedrive: 'lily topology plan/apply/verify' for an
// sqs queue; a dead letter Lily wrote (with evidence) and one SQS moved
// by the redrive policy (a consumer that never settled) are both ingested
// by 'lily dlq ingest'; 'lily dlq redrive' sends the first back to the
// source queue with its event ID, redrive count 1 and retry count reset.
func TestSQSTopologyIngestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "catalog.db")
	queue := fmt.Sprintf("orders.sqs%d", time.Now().UnixNano())
	cfg := sqsConfig(t, db, queue, "")

	code, out, errOut := run(t, "topology", "plan", "--config", cfg, "--json")
	var plan topologyJSON
	mustJSON(t, out, &plan)
	if code != 0 || len(plan.SQSQueues) != 2 || plan.SQSQueues[1].Name != sqs.QueueName(queue)+"-dlq" ||
		!strings.Contains(plan.SQSQueues[0].Attributes["RedrivePolicy"], `"maxReceiveCount":3`) {
		t.Fatalf("plan: exit %d %s %+v", code, errOut, plan.SQSQueues)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg); code != 1 || !strings.Contains(out, "missing") {
		t.Errorf("verify before apply: exit %d %s %s, want 1 with the missing queues", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 || !strings.Contains(out, "declared 1 SQS queues") {
		t.Fatalf("apply: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg, "--json"); code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("verify after apply: exit %d %s %s", code, out, errOut)
	}

	c, err := config.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	qc, _ := c.Queue(queue)
	o, err := brokers.SQSOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sqs.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Register(qc.Spec())
	msgs := []lily.Message{{Body: []byte("ok")}, {EventID: "evt-bad", Key: "cust-7", Type: "order.created", Body: []byte("bad"),
		Headers: lily.Headers{"source-system": "till-42"}}, {EventID: "evt-stuck", Body: []byte("stuck")}}
	if err := lily.Publish(ctx, tr, queue, msgs); err != nil {
		t.Fatal(err)
	}
	// A consumer that receives them and dies every time, until SQS moves
	// them (maxReceiveCount 3): Lily never got to dead-letter them.
	for sqstest.Depth(sqs.DeadLetterQueue(queue)) < 3 {
		if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 10, Wait: time.Second, Consumer: "dies"}); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "dies"}); err != nil {
			t.Fatal(err)
		}
	}
	// A healthy consumer: "bad" fails permanently, "ok2" is acked.
	fresh := []lily.Message{{Body: []byte("ok2")}, {EventID: "evt-bad2", Key: "cust-8", Body: []byte("bad"), Headers: lily.Headers{"source-system": "till-42"}}}
	if err := lily.Publish(ctx, tr, queue, fresh); err != nil {
		t.Fatal(err)
	}
	settled := map[string]bool{}
	cons, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "bad" {
			return lily.Permanent(errors.New("order rejected by schema v3"))
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 1, ReceiveWait: time.Second, Instance: "good",
		Hooks: []lily.Hook{lily.HookFunc(func(_ context.Context, e lily.Event) {
			if e.Kind == lily.EventAcked || e.Kind == lily.EventDeadLettered {
				settled[e.EventID] = true
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	waittest.For(t, "the queue to drain", func() bool { return sqstest.Depth(queue) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	code, out, errOut = run(t, "dlq", "ingest", "--config", cfg, "--json")
	var res ingestJSON
	mustJSON(t, out, &res)
	// The three moved by SQS and evt-bad2, dead-lettered by Lily.
	if code != 0 || res.Total != 4 {
		t.Fatalf("ingest: exit %d %s %+v", code, errOut, res)
	}
	cat := openCatalog(t, db)
	reasons := map[string]string{}
	err = cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		if _, dup := reasons[e.EventID]; dup {
			t.Errorf("event %s in the catalog twice", e.EventID)
		}
		reasons[e.EventID] = e.Reason
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 4 || reasons[msgs[0].EventID] != string(evidence.ReasonDeliveryLimit) || reasons["evt-bad"] != string(evidence.ReasonDeliveryLimit) ||
		reasons["evt-stuck"] != string(evidence.ReasonDeliveryLimit) || reasons["evt-bad2"] != string(evidence.ReasonPermanent) {
		t.Fatalf("catalog reasons %v, want the first three delivery_limit (moved by SQS) and evt-bad2 permanent", reasons)
	}
	if !settled[fresh[0].EventID] {
		t.Errorf("ok2 was not acknowledged")
	}
	if n := sqstest.Depth(sqs.DeadLetterQueue(queue)); n != 0 {
		t.Errorf("%d messages left in the DLQ after ingest", n)
	}

	code, out, errOut = run(t, "dlq", "redrive", "--config", cfg, "--event-ids", "evt-bad2", "--json")
	var rr redriveJSON
	mustJSON(t, out, &rr)
	if code != 0 || rr.Redriven != 1 {
		t.Fatalf("redrive: exit %d %s %+v", code, errOut, rr)
	}
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 10, Wait: 2 * time.Second, Consumer: "check"})
	if err != nil || len(ds) != 1 {
		t.Fatalf("after the redrive: %d messages (%v), want 1", len(ds), err)
	}
	d := ds[0]
	if d.EventID != "evt-bad2" || d.Key != "cust-8" || string(d.Body) != "bad" || d.Headers["source-system"] != "till-42" ||
		evidence.RedriveCount(d.Headers) != 1 || d.DeliveryCount != 1 {
		t.Errorf("redriven %s key %s body %q headers %v count %d, want evt-bad2 cust-8 with redrive count 1", d.EventID, d.Key, d.Body, d.Headers, d.DeliveryCount)
	}
	if n, ok := d.Headers[evidence.HeaderRetryCount]; ok && n != int32(0) {
		t.Errorf("redriven retry count %v, want reset", n)
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
}

// TestSQSLintLive: 'lily lint --live' finds nothing SQS-specific on the
// queues 'lily topology apply' declared, then the redrive policy's
// maxReceiveCount lowered to delivery_limit (exit 1), and statically a
// visibility timeout not longer than the handler timeout.
func TestSQSLintLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "catalog.db")
	queue := fmt.Sprintf("lint-sqs%d", time.Now().UnixNano())
	cfg := sqsConfig(t, db, queue, "handler_timeout_millis = 1000\nowner = \"team-orders\"")
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply: exit %d %s %s", code, out, errOut)
	}
	code, out, errOut := run(t, "lint", "--config", cfg, "--live", "--json")
	var r lint.Report
	mustJSON(t, out, &r)
	if r.Has(lint.CodeSQSMaxReceiveCountAtLimit, queue) || r.Has(lint.CodeSQSQueueMissing, queue) || r.Has(lint.CodeSQSNoRedrivePolicy, queue) ||
		r.Has(lint.CodeSQSVisibilityBelowHandlerTimeout, queue) {
		t.Errorf("lint on the applied topology: exit %d %s %+v", code, errOut, r.Findings)
	}
	c, _ := config.LoadConfig(cfg)
	o, _ := brokers.SQSOptions(c)
	tr, err := sqs.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	url, err := tr.QueueURL(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Client().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{
		"RedrivePolicy": `{"maxReceiveCount":"2","deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:` + sqs.QueueName(sqs.DeadLetterQueue(queue)) + `"}`}}); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "lint", "--config", cfg, "--live", "--json")
	mustJSON(t, out, &r)
	if code != 1 || !r.Has(lint.CodeSQSMaxReceiveCountAtLimit, queue) {
		t.Errorf("lint with maxReceiveCount = delivery_limit: exit %d %+v, want 1 with %s", code, r.Findings, lint.CodeSQSMaxReceiveCountAtLimit)
	}
	slow := sqsConfig(t, db, queue, "handler_timeout_millis = 5000")
	code, out, _ = run(t, "lint", "--config", slow, "--json")
	mustJSON(t, out, &r)
	if !r.Has(lint.CodeSQSVisibilityBelowHandlerTimeout, queue) {
		t.Errorf("static lint with a 2 s visibility and a 5 s handler timeout: exit %d %+v", code, r.Findings)
	}
}

// TestSQSMissingSettingsAreBadInput: without a region or credentials for
// SQS, a command says what to set and exits 2, as on a bad flag
// (brokers.SettingsError).
func TestSQSMissingSettingsAreBadInput(t *testing.T) {
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
	queue := "[[queue]]\nname = \"orders\"\ntransport = \"sqs\"\n"
	for _, tc := range []struct{ config, want string }{
		{queue, "sqs: no region: set sqs_region in the config"},
		{"sqs_region = \"eu-west-1\"\n" + queue, "sqs: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
	} {
		code, _, errOut := run(t, "topology", "verify", "--config", writeConfig(t, tc.config))
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("exit %d %q, want 2 with %q", code, errOut, tc.want)
		}
	}
}
