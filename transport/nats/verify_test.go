package nats_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
)

// TestVerifyFindsWhatDiffers: after Declare, Verify finds nothing; a
// deleted consumer, and a dead-letter stream recreated with work-queue
// retention (which operators cannot peek), are reported with the names of
// the contract.
func TestVerifyFindsWhatDiffers(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	qc := lily.QueueConfig{Name: fmt.Sprintf("verify.%d", time.Now().UnixNano()), Transport: "nats"}.WithDefaults()
	specs := []transport.QueueSpec{qc.Spec()}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
	plan := tr.Plan(specs)
	var names []string
	for _, p := range plan {
		names = append(names, p.Kind+" "+p.Name)
	}
	want := []string{"stream " + nats.StreamName(qc.Name), "consumer lily", "stream " + nats.DeadLetterStream(qc.Name), "stream " + nats.DefaultRetryStream}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("plan %v, want %v", names, want)
	}
	if diffs, err := tr.Verify(ctx, specs); err != nil || len(diffs) != 0 {
		t.Fatalf("verify after declare: %v %v", diffs, err)
	}
	js := tr.JetStream()
	if err := js.DeleteConsumer(ctx, nats.StreamName(qc.Name), nats.DefaultConsumer); err != nil {
		t.Fatal(err)
	}
	dlq, err := js.Stream(ctx, nats.DeadLetterStream(qc.Name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := dlq.CachedInfo().Config
	if err := js.DeleteStream(ctx, cfg.Name); err != nil {
		t.Fatal(err)
	}
	cfg.Retention = jetstream.WorkQueuePolicy
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	diffs, err := tr.Verify(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diffs {
		got = append(got, d.String())
	}
	all := strings.Join(got, "\n")
	if len(diffs) != 2 || !strings.Contains(all, "consumer lily on "+nats.StreamName(qc.Name)+": missing, want exists") ||
		!strings.Contains(all, "stream "+nats.DeadLetterStream(qc.Name)+": retention is workqueue, want limits") {
		t.Errorf("differences:\n%s", all)
	}
}
