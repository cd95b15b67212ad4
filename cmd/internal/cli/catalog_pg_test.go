package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/internal/pgtest"
)

func TestDLQCommandsPostgresCatalog(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	pg := pgtest.URL(t)
	queue := fmt.Sprintf("pgdlq%08x.created", rand.Uint32())
	qc := demo.QueueConfig(queue, lily.TransportRabbitMQ, "")
	cleanupRabbitQueues(t, url, qc)
	code, out, errOut := run(t, "demo", "--transport", "rabbitmq", "--url", url, "--queue", queue, "--catalog", pg, "--no-redrive",
		"--messages", "60", "--malformed", "4", "--flaky", "3", "--hopeless", "2", "--crashing", "0", "--json")
	if code != 0 {
		t.Fatalf("demo: %d\n%s\n%s", code, out, errOut)
	}
	cfg := writeConfig(t, fmt.Sprintf("rabbitmq_url = %q\ncatalog_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\nretry_attempts = 3\nretry_backoff_millis = 20\nmax_retry_backoff_millis = 80\nretry_jitter_ratio = 0.2\n",
		url, pg, queue))

	// Reading: list, group, peek, show — with --catalog and with the
	// config's catalog_url.
	for _, store := range [][]string{{"--catalog", pg}, {"--config", cfg}} {
		code, out, errOut := run(t, append([]string{"dlq", "list", "--json"}, store...)...)
		var list struct{ Queues []dlqListRow }
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Queues) != 1 || list.Queues[0].Depth != 6 {
			t.Errorf("dlq list %v: %d %s %s", store, code, out, errOut)
		}
		code, out, _ = run(t, append([]string{"dlq", "group", "--by", "reason", "--json"}, store...)...)
		var g dlqGroupJSON
		if code != 0 || json.Unmarshal([]byte(out), &g) != nil || g.Total != 6 || len(g.Groups) != 2 {
			t.Errorf("dlq group %v: %d %s", store, code, out)
		}
	}
	code, out, _ = run(t, "dlq", "peek", "--queue", queue, "--limit", "2", "--catalog", pg, "--json")
	var peek struct {
		Entries []entryJSON `json:"entries"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &peek) != nil || len(peek.Entries) != 2 {
		t.Fatalf("peek: %d %s", code, out)
	}
	id := fmt.Sprint(peek.Entries[0].ID)
	if code, out, _ := run(t, "dlq", "show", id, "--catalog", pg, "--json"); code != 0 || !strings.Contains(out, `"event_id"`) {
		t.Errorf("show %s: %d %s", id, code, out)
	}
	// Deciding: discard the malformed with a reason, redrive the rest
	// (dry run first), then reconcile with the broker's side.
	if code, out, errOut := run(t, "dlq", "discard", "--config", cfg, "--queue", queue, "--dead-letter-reason", "permanent", "--reason", "bad payloads, fixed upstream", "--json"); code != 0 || !strings.Contains(out, `"count": 4`) {
		t.Errorf("discard: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", queue, "--dry-run", "--json"); code != 0 || !strings.Contains(out, `"selected": 2`) {
		t.Errorf("redrive --dry-run: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", queue, "--json"); code != 0 || !strings.Contains(out, `"redriven": 2`) {
		t.Errorf("redrive: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "erase", "--catalog", pg, "--ids", id, "--reason", "subject request", "--json"); code != 0 {
		t.Errorf("erase: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "expire", "--catalog", pg, "--dry-run", "--json"); code != 0 {
		t.Errorf("expire --dry-run: %d %s %s", code, out, errOut)
	}
	// The ledger, read from PostgreSQL and the broker, balances: the 2
	// redriven wait in the source queue (in flight), the 4 discarded and
	// the erased entry are discarded with a record, the rest was acked.
	code, out, errOut = run(t, "reconcile", "--config", cfg, "--json")
	var rec reconcileJSON
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != 60 {
		t.Fatalf("reconcile on PostgreSQL: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := run(t, "dlq", "list", "--catalog", pg, "--db", "x.db"); code == 0 || !strings.Contains(errOut, "pass one") {
		t.Errorf("--catalog with --db: %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "dlq", "list", "--catalog", "mysql://x"); code == 0 || !strings.Contains(errOut, "want a PostgreSQL URL") {
		t.Errorf("--catalog mysql: %d %s", code, errOut)
	}
}
