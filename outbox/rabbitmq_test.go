package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

func rabbitURL() string {
	if u := os.Getenv("LILY_TEST_RABBITMQ_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// TestRelayBrokerNacks: the relay publishes to a RabbitMQ queue that
// holds 3 messages and rejects publishes beyond (x-overflow
// reject-publish): the broker nacks, the rows stay unpublished, and each
// time a consumer makes room the relay publishes the next ones. Every row
// arrives (at least once: the first, failed batch put 3 in that were not
// marked), in key order by first arrival, and nothing stays in the outbox.
func TestRelayBrokerNacks(t *testing.T) {
	conn, err := amqp.Dial(rabbitURL())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is not reachable at %s: %v", rabbitURL(), err)
		}
		t.Skipf("SKIPPED — RabbitMQ is not reachable at %s: %v", rabbitURL(), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("outbox.full.%08x", rand.Uint32())
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-max-length": int32(3), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(q, false, false, false)
	ctx := context.Background()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: rabbitURL(), Logger: quiet, ConfirmTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// The application database is SQLite here; the relay's SQL is covered
	// on every store by the tests above.
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "app.db"), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a := migrated(t, app{name: "sqlite", db: db, sql: db})
	{
		const rows = 10
		var ids []string
		for i := range rows {
			ms := []outbox.Message{{Queue: q, Message: lily.Message{Key: "acct-1", Body: []byte(strconv.Itoa(i))}}}
			a.add(t, true, ms...)
			ids = append(ids, ms[0].EventID)
		}
		// The relay's clock moves past the 1 ms backoff after each round,
		// so that a nacked row is due in the next one without a wait.
		now := time.Now()
		r, err := outbox.NewRelay(a.db, tr, outbox.RelayOptions{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Logger: quiet,
			Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		nacks := 0
		for round := 0; round < 50; round++ {
			res, err := r.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			nacks += res.Failed
			for { // the consumer makes room
				d, ok, err := ch.Get(q, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				got = append(got, d.MessageId)
			}
			if p, _ := r.Pending(ctx); p == 0 {
				break
			}
			now = now.Add(2 * time.Millisecond) // past the 1 ms backoff
		}
		if p, _ := r.Pending(ctx); p != 0 {
			t.Fatalf("%d rows still unpublished after 50 rounds", p)
		}
		if nacks == 0 {
			t.Fatal("the broker never nacked: the test did not test a full queue")
		}
		var first []string
		seen := map[string]bool{}
		for _, id := range got {
			if !seen[id] {
				seen[id] = true
				first = append(first, id)
			}
		}
		if fmt.Sprint(first) != fmt.Sprint(ids) {
			t.Fatalf("first arrivals %v, want %v", first, ids)
		}
		t.Logf("%d rows, %d deliveries (%d repeats from nacked batches), %d nacked attempts", rows, len(got), len(got)-rows, nacks)
	}
}
