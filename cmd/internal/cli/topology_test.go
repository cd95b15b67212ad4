package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/rabbittest"
)

// needRabbit returns the broker URL, skipping loudly without a broker —
// except under CI=true, where the test fails.
func needRabbit(t *testing.T) string {
	t.Helper()
	return rabbittest.URL(t)
}

// cleanupRabbitQueues deletes qc's queues from the broker when the test
// ends.
func cleanupRabbitQueues(t *testing.T, url string, qc lily.QueueConfig) {
	rabbittest.DeleteQueues(t, url, qc.Spec())
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lily.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTopologyPlanJSON(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `
[[queue]]
name = "orders.created"
transport = "rabbitmq"
retry_attempts = 3
delivery_limit = 5
`)
	code, out, errOut := run(t, "topology", "plan", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var top struct {
		Exchanges []struct {
			Name, Type string
			Durable    bool
		} `json:"exchanges"`
		Queues []struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		} `json:"queues"`
		Bindings []struct {
			Exchange   string `json:"exchange"`
			Queue      string `json:"queue"`
			RoutingKey string `json:"routing_key"`
		} `json:"bindings"`
	}
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var names []string
	for _, e := range top.Exchanges {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, ","); got != "orders:topic,orders.dlx.v2:direct,orders.retry.v2:direct" {
		t.Errorf("exchanges %s", got)
	}
	queues := map[string]map[string]any{}
	for _, q := range top.Queues {
		queues[q.Name] = q.Arguments
	}
	want := map[string]map[string]any{
		"orders.created": {"x-queue-type": "quorum", "x-delivery-limit": 4.0, "x-dead-letter-exchange": "orders.dlx.v2",
			"x-dead-letter-routing-key": "orders.created", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"},
		"orders.created.retry.v2.1000ms": {"x-message-ttl": 1000.0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.created"},
		"orders.created.retry.v2.2000ms": {"x-message-ttl": 2000.0},
		"orders.created.retry.v2.4000ms": {"x-message-ttl": 4000.0, "x-overflow": "reject-publish", "x-max-length": 100000.0},
		"orders.created.dlq.v2":          {"x-queue-type": "quorum", "x-overflow": "reject-publish", "x-max-length": 1000000.0},
	}
	if len(queues) != len(want) {
		t.Errorf("queues %v, want %d", queues, len(want))
	}
	for q, args := range want {
		for k, v := range args {
			if queues[q][k] != v {
				t.Errorf("%s %s = %v, want %v", q, k, queues[q][k], v)
			}
		}
	}
	if _, ttl := queues["orders.created.dlq.v2"]["x-message-ttl"]; ttl {
		t.Error("the DLQ has a message TTL: retention is Lily's, never silent expiry")
	}
	bindings := map[string]bool{}
	for _, b := range top.Bindings {
		bindings[b.Exchange+">"+b.Queue+">"+b.RoutingKey] = true
	}
	for _, b := range []string{"orders>orders.created>orders.created", "orders.dlx.v2>orders.created.dlq.v2>orders.created",
		"orders.retry.v2>orders.created.retry.v2.1000ms>orders.created.retry.v2.1000ms"} {
		if !bindings[b] {
			t.Errorf("binding %s missing from %v", b, bindings)
		}
	}
	// No retry exchange or bucket without retries.
	cfg0 := writeConfig(t, "[[queue]]\nname = \"orders.created\"\ntransport = \"rabbitmq\"\n")
	_, out0, _ := run(t, "topology", "plan", "--config", cfg0)
	if strings.Contains(out0, "retry") {
		t.Errorf("retry_attempts = 0 planned a retry exchange or bucket:\n%s", out0)
	}
}

func TestTopologyBadInput(t *testing.T) {
	t.Parallel()
	sqliteOnly := writeConfig(t, "[[queue]]\nname = \"a.b\"\n")
	for _, args := range [][]string{
		{"topology", "plan"},
		{"topology", "plan", "--config", sqliteOnly},
		{"topology", "verify", "--config", sqliteOnly},
	} {
		if code, _, errOut := run(t, args...); code != 2 || !strings.Contains(errOut, "--config") {
			t.Errorf("%v: exit %d %q, want 2 naming --config", args, code, errOut)
		}
	}
	bad := writeConfig(t, "[[queue]]\nname = \"a.b\"\ntransport = \"rabbitmq\"\nretry_jitter_ratio = 0.7\n")
	if code, _, errOut := run(t, "topology", "plan", "--config", bad); code == 0 || !strings.Contains(errOut, "retry_jitter_ratio") {
		t.Errorf("invalid config: exit %d %q", code, errOut)
	}
}

// TestTopologyApplyMalformedURL: a malformed rabbitmq_url (or --url) is
// refused before any dial, naming the key; 'topology apply' used to retry
// the dial until its 10 s deadline.
func TestTopologyApplyMalformedURL(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "rabbitmq_url = \"localhost:5672\"\n[[queue]]\nname = \"a.b\"\ntransport = \"rabbitmq\"\n")
	if code, _, errOut := run(t, "topology", "apply", "--config", cfg); code == 0 || !strings.Contains(errOut, "rabbitmq_url") || !strings.Contains(errOut, "amqp://") {
		t.Errorf("malformed rabbitmq_url: exit %d %q, want a refusal naming rabbitmq_url and the amqp:// form", code, errOut)
	}
	good := writeConfig(t, "[[queue]]\nname = \"a.b\"\ntransport = \"rabbitmq\"\n")
	if code, _, errOut := run(t, "topology", "apply", "--config", good, "--url", "rabbit:5672"); code != 2 || !strings.Contains(errOut, "--url") {
		t.Errorf("malformed --url: exit %d %q, want 2 naming --url", code, errOut)
	}
}

func TestTopologyApplyVerify(t *testing.T) {
	t.Parallel()
	url := rabbittest.WithManagement(t) // verify reads the management API
	ex := fmt.Sprintf("clitopo%08x", rand.Uint32())
	cfg := writeConfig(t, fmt.Sprintf(`
rabbitmq_url = %q
[[queue]]
name = "%s.created"
transport = "rabbitmq"
retry_attempts = 2
`, url, ex))
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, _ := conn.Channel()
		for _, q := range []string{ex + ".created", ex + ".created.retry.v2.1000ms", ex + ".created.retry.v2.2000ms", ex + ".created.dlq.v2"} {
			ch.QueueDelete(q, false, false, false)
		}
		for _, e := range []string{ex, ex + ".dlx.v2", ex + ".retry.v2"} {
			ch.ExchangeDelete(e, false, false)
		}
	})
	code, out, _ := run(t, "topology", "verify", "--config", cfg, "--json")
	if code != 1 || !strings.Contains(out, `"missing"`) {
		t.Fatalf("verify before apply: exit %d\n%s", code, out)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply is not idempotent: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg); code != 0 || !strings.Contains(out, "topology OK") {
		t.Fatalf("verify after apply: exit %d\n%s\n%s", code, out, errOut)
	}
	// Break it: remove the DLQ's binding; verify must name it.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.QueueUnbind(ex+".created.dlq.v2", ex+".created", ex+".dlx.v2", nil); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "topology", "verify", "--config", cfg)
	if code != 1 || !strings.Contains(out, "binding "+ex+".created.dlq.v2: missing") {
		t.Errorf("verify after unbinding: exit %d\n%s", code, out)
	}
}
