package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/lint"
	lilyaz "github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
)

// TestForeignDLQAzureFunctions: a Functions-style consumer of a Storage
// queue ([[foreign_dlq]] kind = "azure-functions") fails two messages five
// times each and moves them to "<queue>-poison"; 'lily dlq ingest' takes
// them into the catalog and empties the poison queue, 'lily dlq redrive
// --include-crashers' sends their text back to the trigger queue, and
// 'lily reconcile' balances: accepted 2 = 2 handed back.
func TestForeignDLQAzureFunctions(t *testing.T) {
	t.Parallel()
	tr, err := lilyaz.Open(azuritetest.Options(t, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	svc := tr.Service()
	queue := fmt.Sprintf("cli-fn-%d", time.Now().UnixNano())
	for _, n := range []string{queue, queue + "-poison"} {
		if _, err := svc.CreateQueue(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.DeleteQueue(context.Background(), n, nil) })
	}
	for _, body := range []string{"declined", "cancelled"} {
		if _, err := svc.NewQueueClient(queue).EnqueueMessage(ctx, body, nil); err != nil {
			t.Fatal(err)
		}
	}
	azuritetest.FunctionsRuntime(ctx, t, svc, queue, 5)
	// Nobody drains the poison queue yet: 'lily lint --live' says so.
	bare := writeConfig(t, fmt.Sprintf("db = %q\nazqueue_url = %q\n", filepath.Join(t.TempDir(), "catalog.db"), azuritetest.URL()))
	if !undrained(t, bare, queue) {
		t.Errorf("lint --live: no %s finding for %s", lint.CodeFunctionsPoisonUndrained, queue)
	}
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nazqueue_url = %q\n[[foreign_dlq]]\nqueue = %q\nkind = \"azure-functions\"\n",
		filepath.Join(t.TempDir(), "catalog.db"), azuritetest.URL(), queue))
	if undrained(t, cfg, queue) {
		t.Errorf("lint --live: %s for %s, which the config drains", lint.CodeFunctionsPoisonUndrained, queue)
	}
	code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
	var ing ingestJSON
	if code != 0 || json.Unmarshal([]byte(out), &ing) != nil || ing.Total != 2 {
		t.Fatalf("ingest exit %d, want 2 ingested\n%s\n%s", code, out, errOut)
	}
	// Reached the delivery limit: held back from a bulk redrive unless asked for.
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--include-crashers", "--json"); code != 0 {
		t.Fatalf("redrive exit %d\n%s\n%s", code, out, errOut)
	}
	n := int32(32)
	peek, err := svc.NewQueueClient(queue).PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: &n})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range peek.Messages {
		got = append(got, *m.MessageText)
	}
	sort.Strings(got)
	if fmt.Sprint(got) != "[cancelled declined]" {
		t.Errorf("trigger queue holds %v after the redrive, want both texts back", got)
	}
	if code, row, errOut := reconcileRow(t, cfg, queue); code != 0 || row.Accepted != 2 || row.Acked != 2 || row.Lost != 0 {
		t.Errorf("reconcile exit %d, ledger of %s %+v, want accepted 2 = 2 redriven\n%s", code, queue, row, errOut)
	}
}

// undrained reports whether 'lily lint --live' finds queue's poison queue
// undrained under the config cfg (other tests' poison queues may be in the
// account too: only queue's finding counts).
func undrained(t *testing.T, cfg, queue string) bool {
	t.Helper()
	_, out, errOut := run(t, "lint", "--config", cfg, "--live", "--json")
	var r lint.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("lint --live --json: %v\n%s\n%s", err, out, errOut)
	}
	return r.Has(lint.CodeFunctionsPoisonUndrained, queue)
}
