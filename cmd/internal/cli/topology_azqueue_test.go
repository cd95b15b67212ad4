package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
)

// TestTopologyAzQueue: plan lists the queue and its dead-letter queue by
// their Storage names without a server; verify before apply reports both
// missing (exit 1); apply creates them; verify finds them, and reports a
// dead-letter queue deleted behind Lily's back.
func TestTopologyAzQueue(t *testing.T) {
	t.Parallel()
	o := azuritetest.Options(t, time.Second)
	queue := fmt.Sprintf("topo.az%d", time.Now().UnixNano())
	tr, err := azqueue.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.DeleteQueues(context.Background(), queue); err != nil {
			t.Errorf("delete the test's queues: %v", err)
		}
		tr.Close()
	})
	cfg := writeConfig(t, fmt.Sprintf("azqueue_url = %q\n[[queue]]\nname = %q\ntransport = \"azqueue\"\n", azuritetest.URL(), queue))
	main, dlq := azqueue.QueueName(queue), azqueue.DeadLetterQueue(queue)
	code, out, errOut := run(t, "topology", "plan", "--config", cfg)
	if code != 0 || !strings.Contains(out, main+"  ") || !strings.Contains(out, dlq) || !strings.Contains(out, "AZURE QUEUE") {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = run(t, "topology", "verify", "--config", cfg, "--json")
	var v verifyJSON
	mustJSON(t, out, &v)
	if code != 1 || v.OK || len(v.AzQueueDifferences) != 2 || v.AzQueueDifferences[0].Got != "missing" {
		t.Fatalf("verify before apply: exit %d %+v, want both queues missing", code, v)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 || !strings.Contains(out, "declared 1 Azure Storage queues") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg); code != 0 || !strings.Contains(out, "topology OK: 2 Azure Storage queues") {
		t.Fatalf("verify after apply: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := tr.Service().DeleteQueue(context.Background(), dlq, nil); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "topology", "verify", "--config", cfg)
	if code != 1 || !strings.Contains(out, "azure queue "+dlq+" (dlq of "+queue+"): missing, want exists") {
		t.Errorf("verify with the dead-letter queue deleted: exit %d\n%s", code, out)
	}
}
