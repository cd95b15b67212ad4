package effecttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// RandomQueue is prefix with a random suffix, so that parallel tests and
// runs never share a queue.
func RandomQueue(prefix string) string { return fmt.Sprintf("%s.%08x", prefix, rand.Uint32()) }

// ForeignPayments are the payments of TestKill9ForeignProducers as a
// foreign producer sends them: n JSON bodies, payment i's amount 100+i
// (in its x-amount header), and the sum of those amounts.
func ForeignPayments(n int) (bodies [][]byte, wantAmount int64) {
	bodies = make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"payment":%d}`, i)
		wantAmount += int64(100 + i)
	}
	return bodies, wantAmount
}

// RunForeignKills runs the kill loop on qc's broker (tr, reached at
// broker) with a SQLite application database and a SQLite catalog, and
// checks exactly-once effects, stable IDs and the ledger.
func RunForeignKills(t *testing.T, qc lily.QueueConfig, tr transport.InFlightCounter, broker string, bodies [][]byte, wantAmount int64, idOK func(string) bool) {
	t.Helper()
	dir := t.TempDir()
	app, dsn := App(t, "sqlite", dir)
	logPath, catPath := filepath.Join(dir, "deliveries.log"), filepath.Join(dir, "catalog.db")
	start := time.Now()
	// A static Kafka member and a RabbitMQ consumer keep one instance
	// name; the broker gives a dead one's deliveries back itself.
	kills := KillLoop(t, 4*len(bodies), ChildEnv{Transport: qc.Transport, Queue: qc.Name, Broker: broker,
		Catalog: catPath, AppKind: "sqlite", AppDSN: dsn, Log: logPath},
		func(int) string { return "inbox-crash" }, nil)
	CheckExactlyOnce(t, app, logPath, kills, bodies, wantAmount, idOK)
	cat, err := catalog.Open(context.Background(), catPath)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	CheckLedger(t, cat, tr, qc.Name, int64(len(bodies)))
	t.Logf("%s: %d foreign messages, %d kills in %v", qc.Transport, len(bodies), kills, time.Since(start).Round(time.Millisecond))
}
