package livelint

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/azqueue"
)

// ReadStorageQueues lists the names of the storage account's queues
// through t.
func ReadStorageQueues(ctx context.Context, t *azqueue.Transport) ([]string, error) {
	var names []string
	pager := t.Service().NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("azqueue: list the account's queues: %w", err)
		}
		for _, q := range page.Queues {
			if q.Name != nil {
				names = append(names, *q.Name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// CheckFunctions judges the storage account's queues: every
// "<queue>-poison" queue — where an Azure Functions queue trigger moves the
// messages it gave up on, with no reason and a 7-day time-to-live — must be
// drained by a [[foreign_dlq]] kind = "azure-functions" entry for <queue>
// (functions-poison-undrained, error). Lily's own "<queue>-dlq" queues are
// not poison queues.
func CheckFunctions(cfg config.Config, queues []string) []lint.Finding {
	drained := map[string]bool{}
	for _, f := range cfg.ForeignDLQs {
		if f.Kind == config.ForeignAzureFunctions {
			drained[f.Queue] = true
		}
	}
	var out []lint.Finding
	for _, n := range queues {
		trigger, ok := strings.CutSuffix(n, "-poison")
		if !ok || drained[trigger] {
			continue
		}
		out = append(out, lint.Finding{
			Severity: lint.Error, Queue: trigger, Code: lint.CodeFunctionsPoisonUndrained,
			What: fmt.Sprintf("the storage account has the poison queue %s, and no [[foreign_dlq]] kind = \"azure-functions\" drains it", n),
			Why: "Azure Functions moves a message there after maxDequeueCount dequeues with no reason, no error and no count; " +
				"nobody is told, and the service deletes it when its time-to-live runs out (7 days by default): lost in silence",
			Fix: fmt.Sprintf("add [[foreign_dlq]] queue = %q, kind = \"azure-functions\" (with the app's max_dequeue_count) so that "+
				"'lily serve' or 'lily dlq ingest' takes its messages into the catalog", trigger),
		})
	}
	return out
}
