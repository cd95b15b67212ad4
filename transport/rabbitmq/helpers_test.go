package rabbitmq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The set-up the tests of this package share: a random queue name, its
// topology declared and removed, a raw amqp091 channel, a temporary
// catalog and a logger nobody reads.

// randomName is prefix with a random suffix, so that parallel tests and
// runs never share a queue.
func randomName(prefix string) string { return fmt.Sprintf("%s.%08x", prefix, rand.Uint32()) }

// randomQueue is qc, with its defaults, as a RabbitMQ queue named prefix
// and a random suffix.
func randomQueue(prefix string, qc lily.QueueConfig) lily.QueueConfig {
	qc.Name, qc.Transport = randomName(prefix), lily.TransportRabbitMQ
	return qc.WithDefaults()
}

// openAccounted connects to the broker and opens a temporary catalog,
// both closed when the test ends, and returns the transport through the
// catalog's ledger: the Open of the shared harnesses.
func openAccounted(t *testing.T) (transport.Transport, *catalog.Store) {
	t.Helper()
	tr := open(t)
	t.Cleanup(func() { tr.Close() })
	cat := tempCatalog(t)
	return ledger.Account(tr, ledger.New(cat)), cat
}

// quiet is a logger for consumers whose log the test does not read.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// rawChannel dials the broker with a plain amqp091 client, as a foreign
// producer would; the connection is closed when the test ends.
func rawChannel(t *testing.T) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// declared declares qc's topology through d (a transport, or one wrapped
// by ledger.Account) and removes it when the test ends. The removal goes
// through a connection of its own: the test's transport is usually closed
// by then.
func declared(t *testing.T, d transport.Declarer, qc lily.QueueConfig) {
	t.Helper()
	if err := d.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: brokerURL(), Logger: quiet()})
		if err != nil {
			t.Logf("removing queue %s: %v", qc.Name, err)
			return
		}
		defer tr.Close()
		if err := tr.DeleteQueues(ctx, qc.Spec()); err != nil {
			t.Logf("removing queue %s: %v", qc.Name, err)
		}
	})
}

// openDeclared connects to the broker as open does, declares qc's
// topology, and removes it and closes the transport when the test ends.
func openDeclared(t *testing.T, qc lily.QueueConfig) *rabbitmq.Transport {
	t.Helper()
	tr := open(t)
	t.Cleanup(func() { tr.Close() })
	declared(t, tr, qc)
	return tr
}

// tempCatalog opens a catalog in a temporary SQLite file.
func tempCatalog(t *testing.T) *catalog.Store { return transporttest.TempCatalog(t) }

// openWith connects to the real broker with opts (URL and logger filled
// in). Without a broker it skips or fails as open does; with one, a
// transport that does not open fails the test.
func openWith(t *testing.T, opts rabbitmq.Options) *rabbitmq.Transport {
	t.Helper()
	open(t).Close() // skips loudly, or fails under CI=true, without a broker
	opts.URL = brokerURL()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, opts)
	if err != nil {
		t.Fatalf("RabbitMQ at %s answered, but the transport with these options did not open: %v", brokerURL(), err)
	}
	return tr
}

// slogTo is a text logger writing to w.
func slogTo(w *transporttest.SyncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// receiveN calls Receive with p (Max: what is still missing) until n
// deliveries came, failing the test after 10 s.
func receiveN(t *testing.T, tr transport.Transport, p transport.ReceiveParams, n int) []*transport.Delivery {
	t.Helper()
	var out []*transport.Delivery
	transporttest.WaitWithin(t, 10*time.Second, fmt.Sprintf("%d deliveries from %s", n, p.Queue), func() (bool, string) {
		p.Max = n - len(out)
		ds, err := tr.Receive(context.Background(), &p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
		return len(out) >= n, fmt.Sprintf("received %d of %d", len(out), n)
	})
	return out
}

// getOne takes one message from queue with basic.get (no ack), failing
// the test when none arrives within 10 s.
func getOne(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	var d amqp.Delivery
	transporttest.WaitWithin(t, 10*time.Second, "a message in "+queue, func() (bool, string) {
		var ok bool
		var err error
		if d, ok, err = ch.Get(queue, false); err != nil {
			t.Fatal(err)
		}
		return ok, "basic.get found nothing"
	})
	return d
}
