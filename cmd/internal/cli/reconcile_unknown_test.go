package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
)

// TestReconcileWithoutManagementSaysUnknown (issue 30, item 3b): without
// the management API (rabbitmq_management_url on a closed port, as on a
// broker without the plugin), the deliveries a consumer of another process
// holds cannot be read through AMQP. 'lily reconcile' must not call them
// lost: it says "unknown — 5 may be held by consumers in other processes;
// enable the management plugin" and exits 3 (--json: unknown 5, lost 0).
// Once the other consumer gives them back, they are ready in the queue,
// and reconcile balances (exit 0). Before, it reported lost 5, exit 1.
func TestReconcileWithoutManagementSaysUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, tr := dialTestRabbit(t)
	defer tr.Close()
	qc := lily.QueueConfig{Name: fmt.Sprintf("reconcile.unknown.%08x", rand.Uint32()), Transport: lily.TransportRabbitMQ}.WithDefaults()
	env := newReconcileEnv(t, url, tr, qc, "")
	toml, err := os.ReadFile(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(env.cfg, append([]byte("rabbitmq_management_url = \"http://127.0.0.1:1\"\n"), toml...), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 5
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i].Body = fmt.Appendf(nil, "held-%d", i)
	}
	if err := lily.Publish(ctx, env.acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	// Another process's consumer (its own connection) holds all five.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(n, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(qc.Name, "other-process", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var held []amqp.Delivery
	for len(held) < n {
		held = append(held, <-ds)
	}
	var out, errb bytes.Buffer
	code := Run(ctx, []string{"reconcile", "--config", env.cfg}, &out, &errb)
	text := out.String() + errb.String()
	if code != exitUnknown || !strings.Contains(text, "unknown — 5 may be held by consumers in other processes; enable the management plugin") {
		t.Errorf("reconcile while another process holds %d, without the management API: exit %d, want %d, saying unknown:\n%s", n, code, exitUnknown, text)
	}
	out.Reset()
	errb.Reset()
	code = Run(ctx, []string{"reconcile", "--config", env.cfg, "--json"}, &out, &errb)
	var got struct {
		Queues   []ledger.Row `json:"queues"`
		Balanced bool         `json:"balanced"`
		Unknown  int64        `json:"unknown"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("reconcile --json: %v: %s %s", err, out.String(), errb.String())
	}
	if code != exitUnknown || got.Balanced || got.Unknown != n || len(got.Queues) != 1 || got.Queues[0].Lost != 0 ||
		got.Queues[0].Unknown != n || !strings.Contains(got.Queues[0].UnknownWhy, "management API is unreachable") {
		t.Errorf("reconcile --json: exit %d, %+v", code, got)
	}
	// The other process gives them back: ready in the queue, accounted for.
	for _, d := range held {
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	// The broker's queue learns of the closed channel after close-ok:
	// wait until it counts the five ready and no consumer (a clean-clone
	// CI run once reconciled in between and read 1 consumer).
	waittest.ForState(t, "the queue to count the given-back deliveries and no consumer", func() (bool, string) {
		c, err := conn.Channel()
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		q, err := c.QueueDeclarePassive(qc.Name, true, false, false, false, nil)
		if err != nil {
			return false, err.Error()
		}
		return q.Messages == n && q.Consumers == 0, fmt.Sprintf("%d ready, %d consumers", q.Messages, q.Consumers)
	})
	code, row, errs := reconcileRow(t, env.cfg, qc.Name)
	if want := (ledger.Row{Queue: qc.Name, Accepted: n, InFlight: n, InFlightReady: n}); code != 0 || row != want {
		t.Errorf("reconcile once the other process gave them back: exit %d, %+v, want %+v (stderr %s)", code, row, want, strings.TrimSpace(errs))
	}
}
