package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/pgtest"
)

// The demo and every 'lily dlq' command run on a PostgreSQL catalog as on
// SQLite: the demo's second half (discard, sampled redrive, the fixed
// worker acking) leaves the ledger balanced, and the work-list commands
// read and decide the first half's dead letters.
func TestDemoPostgresCatalog(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{lily.TransportRabbitMQ, lily.TransportKafka} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			pg := pgtest.URL(t)
			var args []string
			queue := fmt.Sprintf("pgdemo%08x.created", rand.Uint32())
			if kind == lily.TransportRabbitMQ {
				url := needRabbit(t)
				cleanupRabbitQueues(t, url, demoQueueConfig(queue, kind))
				args = append(args, "--url", url)
			}
			got := runBrokerDemo(t, kind, append(args, "--queue", queue, "--catalog", pg)...)
			if got.Catalog == "" || got.DB != "" {
				t.Errorf("demo JSON db %q, catalog %q: want the catalog named", got.DB, got.Catalog)
			}
			// A second run on the same catalog and queue is refused: the
			// ledger would not be its own.
			code, _, errOut := run(t, append([]string{"demo", "--transport", kind, "--messages", "10", "--malformed", "0", "--flaky", "0", "--hopeless", "0", "--crashing", "0", "--catalog", pg, "--queue", queue}, args...)...)
			if code == 0 || !strings.Contains(errOut, "already holds queue") {
				t.Errorf("second demo on the catalog: exit %d, %s", code, errOut)
			}
			code, out, errOut := run(t, "audit", "--catalog", pg, "--json")
			if code != 0 {
				t.Fatalf("audit --catalog: %d %s", code, errOut)
			}
			var audit struct {
				Records []struct {
					Action, Outcome string
					Count           int
				} `json:"records"`
			}
			if err := json.Unmarshal([]byte(out), &audit); err != nil || len(audit.Records) == 0 {
				t.Fatalf("audit JSON: %v\n%s", err, out)
			}
			n := map[string]int{}
			for _, r := range audit.Records {
				n[r.Action+"/"+r.Outcome] += r.Count
			}
			if n["discard/discarded"] != 6 || n["redrive/redriven"] != 5 {
				t.Errorf("audit on PostgreSQL %v, want 6 discarded and 5 redriven", n)
			}
		})
	}
}

func TestDLQCommandsPostgresCatalog(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	pg := pgtest.URL(t)
	queue := fmt.Sprintf("pgdlq%08x.created", rand.Uint32())
	qc := demoQueueConfig(queue, lily.TransportRabbitMQ)
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
