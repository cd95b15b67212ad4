package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// TestServeIngestsForeignDLQs: 'lily serve' drains a [[foreign_dlq]]
// continuously, as it drains Lily's own DLQs — MassTransit faults made
// before and while it runs land in the catalog once each, with the
// foreign queue's ledger counting them accepted, and the broker queue
// ends empty.
func TestServeIngestsForeignDLQs(t *testing.T) {
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	url := needRabbit(t)
	_, cfg, _ := brokerQueue(t, url)
	b := newForeignBroker(t, url)
	p := fmt.Sprintf("sf%08x", rand.Uint32())
	orders, ordersErr := p+".orders", p+".orders_error"
	b.declare(orders, nil)
	b.declare(ordersErr, nil)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[[foreign_dlq]]\nqueue = %q\nkind = \"masstransit\"\n", ordersErr)
	f.Close()
	addr := "rabbitmq://rabbit.internal:5672/shop/" + orders
	b.publish(ordersErr, mtFault("0b5e0000-0002-0000-0000-000000000001", addr, "Payment declined for order 1", 3))
	b.publish(ordersErr, mtFault("0b5e0000-0002-0000-0000-000000000002", addr, "Payment declined for order 2", 3))

	db, cat := newCatalogFile(t)
	s := serveProcess(t, "--config", cfg, "--db", db, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms", "--ingest-lease-ttl", "2s")
	waitEntries(t, cat, ordersErr, 2)
	b.publish(ordersErr, mtFault("0b5e0000-0002-0000-0000-000000000003", addr, "Order 3 has no lines", 0)) // made while it runs
	waitEntries(t, cat, ordersErr, 3)
	s.stop(t)
	if left := b.getAll(ordersErr); len(left) != 0 {
		t.Errorf("%d messages left in %s after the ingest", len(left), ordersErr)
	}
	code, out, errOut := run(t, "reconcile", "--config", cfg, "--db", db, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || !rec.Balanced {
		t.Fatalf("reconcile: %v %s", err, out)
	}
	found := false
	for _, r := range rec.Queues {
		if r.Queue == ordersErr {
			found = true
			if r.Accepted != 3 || r.Lost != 0 {
				t.Errorf("ledger of %s: %+v, want accepted 3 (pending in the catalog), lost 0", r.Queue, r)
			}
		}
	}
	if !found {
		t.Errorf("reconcile shows no row for %s: %s", ordersErr, out)
	}
}
