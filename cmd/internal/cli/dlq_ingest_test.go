package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

func TestDLQIngestRabbitMQ(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	ctx := context.Background()
	queue := fmt.Sprintf("ingest%08x.created", rand.Uint32())
	qc := lily.QueueConfig{Name: queue, Transport: lily.TransportRabbitMQ, DeliveryLimit: new(2)}.WithDefaults()
	cleanupRabbitQueues(t, url, qc)
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	// One dead letter with Lily's evidence, one the broker makes itself at
	// the delivery limit (rejected twice).
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The run ends once the dead letter's hand-off is confirmed.
	deadLettered := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventDeadLettered {
			cancel()
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		return lily.Permanent(errors.New("schema mismatch"))
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{deadLettered}})
	if err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, queue, []lily.Message{{EventID: "evt-lily", Body: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		t.Fatalf("consumer: %v", err)
	}
	if err := lily.Publish(ctx, tr, queue, []lily.Message{{EventID: "evt-broker", Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	// A consumer that rejects (requeues) it until the broker gives up.
	waittest.ForState(t, "the broker to dead-letter at the delivery limit", func() (bool, string) {
		n, derr := tr.DeadLetterDepth(ctx, queue)
		if derr == nil && n == 2 {
			return true, ""
		}
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 1, Wait: 50 * time.Millisecond, Consumer: "rejecter"})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Release}}}); err != nil {
				t.Fatal(err)
			}
		}
		return false, fmt.Sprintf("DLQ depth %d (%v)", n, derr)
	})
	tr.StopConsumer(ctx, &transport.StopParams{Queue: queue, Consumer: "rejecter"})
	cfg := writeConfig(t, fmt.Sprintf("rabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\ndelivery_limit = 2\n", url, queue))
	db := filepath.Join(t.TempDir(), "catalog.db")
	code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--db", db, "--json")
	if code != 0 {
		t.Fatalf("ingest exit %d\n%s\n%s", code, out, errOut)
	}
	var res ingestJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Total != 2 {
		t.Fatalf("ingest JSON %s (%v), want 2 ingested", out, err)
	}
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	reasons := map[string]string{}
	cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		reasons[e.EventID] = e.Reason
		if e.EventID == "evt-broker" && !strings.Contains(e.ErrorMessage, "delivery_limit") {
			t.Errorf("broker dead letter's evidence %q does not name delivery_limit", e.ErrorMessage)
		}
		return nil
	})
	if reasons["evt-lily"] != "permanent" || reasons["evt-broker"] != "delivery_limit" || len(reasons) != 2 {
		t.Errorf("catalog reasons %v, want evt-lily permanent and evt-broker delivery_limit", reasons)
	}
	if n, _ := tr.DeadLetterDepth(ctx, queue); n != 0 {
		t.Errorf("DLQ still holds %d after ingest", n)
	}
	// Ingest again: nothing new.
	if code, out, _ := run(t, "dlq", "ingest", "--config", cfg, "--db", db, "--json"); code != 0 || !strings.Contains(out, `"total": 0`) {
		t.Errorf("second ingest: %d %s", code, out)
	}
	if code, _, errOut := run(t, "dlq", "ingest", "--config", cfg, "--db", db, "--queue", "nope"); code != 2 || !strings.Contains(errOut, "--queue nope") {
		t.Errorf("ingest of an unknown queue: %d %s", code, errOut)
	}
}
