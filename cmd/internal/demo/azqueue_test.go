package demo_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
)

// TestDemoAzQueue runs the demo on Azurite with the same workload and
// counts as on the other brokers: the crashing orders are counted by the
// service's DequeueCount (each worker death leaves them to come back after
// their visibility timeout), retries wait out their delay invisible in the
// queue (Update Message), and after the redrive nothing is lost or in
// flight.
func TestDemoAzQueue(t *testing.T) {
	t.Parallel()
	o := azuritetest.Options(t, time.Second)
	queue := fmt.Sprintf("orders.demo-azqueue-%d", time.Now().UnixNano())
	azuritetest.DeleteQueuesAtEnd(t, o, queue)
	db := filepath.Join(t.TempDir(), "catalog.db")
	demotest.RunBroker(t, lilyDemo, lily.TransportAzQueue, "--url", azuritetest.URL(), "--queue", queue, "--db", db)
}
