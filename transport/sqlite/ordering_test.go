package sqlite_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOrderedKeyOutlivesADeadConsumer: a consumer dies holding the first
// message of key K (its lease runs on). The next consumer of the ordered
// queue processes the other keys at once but none of K's later messages
// until K's first one came back and was processed: the store hands a key's
// messages out in order (KeyOrder), not just the runtime.
func TestOrderedKeyOutlivesADeadConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Two transports on one file: the dying consumer's lease runs out
	// after 300 ms; the live consumer's are the default 30 s, so that a
	// starved machine never takes one of its messages back mid-handler (a
	// stress run saw K/1 handled twice with 300 ms for everyone).
	path := filepath.Join(t.TempDir(), "lily.db")
	tr, err := sqlite.Open(ctx, path, sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dying, err := sqlite.Open(ctx, path, sqlite.Options{VisibilityTimeout: 300 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer dying.Close()
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	q := lily.QueueConfig{Name: "ordered.dead", Ordering: lily.OrderingPark}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := []lily.Message{{Key: "K", Body: []byte("K/0")}, {Key: "K", Body: []byte("K/1")}, {Key: "J", Body: []byte("J/0")}, {Key: "K", Body: []byte("K/2")}}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	// The consumer that dies: it leased K/0 and never settles it.
	if ds, err := dying.Receive(ctx, &transport.ReceiveParams{Queue: q.Name, Max: 1, Consumer: "dead"}); err != nil || len(ds) != 1 || string(ds[0].Body) != "K/0" {
		t.Fatalf("the dying consumer's receive = %v, %v", ds, err)
	}
	log := &transporttest.BodyLog{}
	c, err := lily.NewConsumer(tr, log, lily.ConsumerOptions{Queue: q, Keys: redrive.NewKeys(cat), ReceiveWait: 20 * time.Millisecond, KeyPoll: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	transporttest.WaitFor(t, "every message processed", func() bool { return len(log.Bodies()) == len(msgs) })
	stop()
	order := log.Bodies()
	var k []string
	for _, b := range order {
		if b[0] == 'K' {
			k = append(k, b)
		}
	}
	if want := []string{"K/0", "K/1", "K/2"}; !slices.Equal(k, want) {
		t.Errorf("K processed in order %v, want %v (all: %v)", k, want, order)
	}
	if order[0] != "J/0" {
		t.Errorf("processed %v: J/0 should not wait for K's dead lease", order)
	}
	if ks, err := redrive.NewKeys(cat).HeldKeys(ctx, q.Name); err != nil || len(ks) != 0 {
		t.Errorf("held keys at the end = %+v (%v)", ks, err)
	}
	if rows, err := ledger.New(cat).Rows(ctx, tr); err != nil || len(rows) != 1 || rows[0] != (ledger.Row{Queue: q.Name, Accepted: 4, Acked: 4}) {
		t.Errorf("ledger = %+v (%v)", rows, err)
	}
}
