package demo_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// TestDemoNATS runs the demo on the machine's NATS server with the same
// workload and counts as on the other brokers: the crashing orders are
// counted by the server's NumDelivered (each worker death leaves them to
// come back after AckWait), retries wait out their delay on the server
// (NakWithDelay), and after the redrive nothing is lost or in flight.
func TestDemoNATS(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	queue := fmt.Sprintf("orders.demo-nats-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		tr, err := nats.Open(nats.Options{URL: url})
		if err != nil {
			t.Error(err)
			return
		}
		defer tr.Close()
		if err := tr.DeleteQueue(context.Background(), demo.QueueConfig(queue, lily.TransportNATS, "").Spec()); err != nil {
			t.Errorf("delete the demo's queue: %v", err)
		}
	})
	db := filepath.Join(t.TempDir(), "catalog.db")
	demotest.RunBroker(t, lilyDemo, lily.TransportNATS, "--url", url, "--queue", queue, "--db", db)
}
