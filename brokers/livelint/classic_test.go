package livelint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// TestCheckBrokerClassicMainQueue: a main queue that is classic gets one
// error finding naming the type and the fix, which also explains the
// drift of its quorum-only arguments.
func TestCheckBrokerClassicMainQueue(t *testing.T) {
	for _, typ := range []string{"classic", "stream"} {
		b := plannedBroker(t, "3.10.8")
		q := b.queue("main")
		q.Type = typ
		delete(q.Arguments, "x-queue-type")
		delete(q.Arguments, "x-delivery-limit")
		delete(q.Arguments, "x-dead-letter-strategy")
		b.Differences = []rabbitmq.Difference{
			{Kind: "argument", Name: q.Name, Problem: "missing", Detail: "x-queue-type = quorum"},
			{Kind: "argument", Name: q.Name, Problem: "missing", Detail: "x-delivery-limit = 4"},
			{Kind: "argument", Name: q.Name, Problem: "missing", Detail: "x-dead-letter-strategy = at-least-once"},
		}
		fs := CheckBroker(parse(t, rabbitConfig), b)
		if got := strings.Join(codes(fs), ","); got != "error queue-not-quorum" {
			t.Fatalf("%s: findings %q, want only error queue-not-quorum", typ, got)
		}
		f := fs[0]
		if f.Queue != "orders.created" || !strings.Contains(f.What, typ+" queue") ||
			!strings.Contains(f.Fix, "quorum") || !strings.Contains(f.Fix, "lily topology apply") {
			t.Errorf("%s: finding %+v", typ, f)
		}
	}
}

// TestLiveReportsClassicMainQueue declares a Lily queue's topology on the
// real broker, replaces its main queue by a classic queue with the same
// dead-letter arguments (as a queue that existed before Lily would be),
// and runs the live lint: it reports the classic queue.
func TestLiveReportsClassicMainQueue(t *testing.T) {
	url := os.Getenv("LILY_RABBITMQ_URL")
	if url == "" {
		url = rabbitmq.DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is required under CI=true and unreachable at %s: %v", url, err)
		}
		t.Skipf("SKIPPING: RabbitMQ unreachable at %s (%v)", url, err)
	}
	defer tr.Close()
	name := fmt.Sprintf("lint.classic.%08x", rand.Uint32())
	cfg := parse(t, fmt.Sprintf("[[queue]]\nname = %q\ntransport = \"rabbitmq\"\nowner = \"t\"\n", name))
	specs := RabbitMQSpecs(cfg)
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
		t.Fatal(err)
	}
	defer tr.DeleteQueues(context.Background(), specs...)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(name, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": rabbitmq.DeadLetterExchange(specs[0].Exchange), "x-dead-letter-routing-key": name}); err != nil {
		t.Fatal(err)
	}
	m, err := rabbitmq.ManagementFor(url)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := RabbitMQ(ctx, cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fs {
		if f.Code == lint.CodeNotQuorum {
			found = true
			if f.Severity != lint.Error || !strings.Contains(f.What, "classic queue") {
				t.Errorf("finding %+v", f)
			}
		}
	}
	if !found {
		t.Errorf("no %s finding for the classic main queue; findings %v", lint.CodeNotQuorum, codes(fs))
	}
	// Nothing moved: the queues hold no messages.
	st, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil || st.Messages != 0 {
		t.Errorf("classic queue holds %d messages (%v), want 0", st.Messages, err)
	}
}
