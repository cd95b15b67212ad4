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

// TestLiveReportsClassicMainQueue declares two Lily queues' topology on
// the real broker, replaces one main queue by a classic queue with the
// same dead-letter arguments (as a queue that existed before Lily would
// be), leaves a third undeclared, and runs the live lint through AMQP alone
// (no management API, as on a fresh broker): the classic queue is an
// error, the missing one too, the quorum one has no finding, and one
// live-checks-not-run error names every check that needs the management
// plugin. Then with the management API as the broker has it: with the
// plugin on the same classic queue is reported by the management checks,
// with it off the AMQP path runs and the finding names the API's error.
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
	base := fmt.Sprintf("lint.classic.%08x", rand.Uint32())
	classic, quorum, missing := base+".classic", base+".quorum", base+".missing"
	var toml strings.Builder
	for _, n := range []string{classic, quorum, missing} {
		fmt.Fprintf(&toml, "[[queue]]\nname = %q\ntransport = \"rabbitmq\"\nowner = \"t\"\n", n)
	}
	cfg := parse(t, toml.String())
	specs := RabbitMQSpecs(cfg)[:2]
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
	if _, err := ch.QueueDelete(classic, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(classic, true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": rabbitmq.DeadLetterExchange(specs[0].Exchange), "x-dead-letter-routing-key": classic}); err != nil {
		t.Fatal(err)
	}

	// checkAMQPFindings checks the findings of the AMQP path; why is what
	// the live-checks-not-run finding must say about the management API.
	checkAMQPFindings := func(fs []lint.Finding, why string) {
		t.Helper()
		got := map[string]lint.Finding{}
		for _, f := range fs {
			got[f.Code+" "+f.Queue] = f
		}
		if len(fs) != 3 {
			t.Errorf("findings %v, want queue-not-quorum, topology-drift and live-checks-not-run", codes(fs))
		}
		if f, ok := got[lint.CodeNotQuorum+" "+classic]; !ok || f.Severity != lint.Error || !strings.Contains(f.What, "classic queue") {
			t.Errorf("queue-not-quorum of %s: %+v (found %v)", classic, f, ok)
		}
		if f, ok := got[lint.CodeTopologyDrift+" "+missing]; !ok || f.Severity != lint.Error || !strings.Contains(f.What, "does not exist") {
			t.Errorf("topology-drift of %s: %+v (found %v)", missing, f, ok)
		}
		f, ok := got[lint.CodeLiveChecksNotRun+" "]
		if !ok || f.Severity != lint.Error || !strings.Contains(f.What, why) || !strings.Contains(f.Fix, "rabbitmq-plugins enable rabbitmq_management") {
			t.Errorf("live-checks-not-run: %+v (found %v), want an error naming %q and the plugin", f, ok, why)
		}
		for _, c := range needsManagement {
			if !strings.Contains(f.What, c) {
				t.Errorf("live-checks-not-run does not name %s: %q", c, f.What)
			}
		}
	}

	fs, err := RabbitMQLive(ctx, cfg, RabbitMQOptions{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	checkAMQPFindings(fs, "no management API was given")

	m, err := rabbitmq.ManagementFor(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, merr := ReadBroker(ctx, cfg, m); merr != nil {
		t.Logf("the management API cannot be read (%v): checking the AMQP path again", merr)
		fs, err = RabbitMQLive(ctx, cfg, RabbitMQOptions{URL: url, Management: m})
		if err != nil {
			t.Fatal(err)
		}
		checkAMQPFindings(fs, m.URL)
	} else {
		fs, err = RabbitMQLive(ctx, cfg, RabbitMQOptions{URL: url, Management: m})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range fs {
			switch {
			case f.Code == lint.CodeNotQuorum && f.Queue == classic:
				found = f.Severity == lint.Error && strings.Contains(f.What, "classic queue")
			case f.Code == lint.CodeLiveChecksNotRun, f.Queue == quorum:
				t.Errorf("finding %+v with the management API read", f)
			}
		}
		if !found {
			t.Errorf("no %s finding for the classic main queue; findings %v", lint.CodeNotQuorum, codes(fs))
		}
	}
	// Nothing moved, nothing was created: the queues hold no messages,
	// the missing one is still missing.
	st, err := ch.QueueDeclarePassive(classic, true, false, false, false, nil)
	if err != nil || st.Messages != 0 {
		t.Errorf("classic queue holds %d messages (%v), want 0", st.Messages, err)
	}
	if _, err := ch.QueueDeclarePassive(missing, true, false, false, false, nil); err == nil {
		t.Errorf("queue %s exists after the lint, want it never created", missing)
	}
}

// TestLiveNeitherReadable: when neither the management API nor AMQP can
// be read, RabbitMQLive fails at once naming both, never returns a clean
// report.
func TestLiveNeitherReadable(t *testing.T) {
	ctx := context.Background() // no deadline: the lint must not wait for one
	m, err := rabbitmq.ManagementFor("amqp://guest:guest@127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	// ManagementFor keeps the host and takes the API's default port,
	// where this machine's broker may answer: point it nowhere.
	m.URL = "http://127.0.0.1:1"
	cfg := parse(t, "[[queue]]\nname = \"a.b\"\ntransport = \"rabbitmq\"\nowner = \"t\"\n")
	fs, err := RabbitMQLive(ctx, cfg, RabbitMQOptions{URL: "amqp://guest:guest@127.0.0.1:1/", Management: m})
	if err == nil || !strings.Contains(err.Error(), "management API") || !strings.Contains(err.Error(), "AMQP") {
		t.Errorf("findings %v, error %v: want an error naming the management API and AMQP", codes(fs), err)
	}
}
