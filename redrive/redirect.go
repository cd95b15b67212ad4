package redrive

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lily-mq/lily/catalog"
)

// redirect returns where a redrive of queue's entries goes — p.To, or the
// source queue itself — and the audit text saying so, naming both queues
// when they differ.
func redirect(p Params, queue string) (dest, sent string) {
	if p.To == "" || p.To == queue {
		return queue, "sent to " + queue
	}
	return p.To, fmt.Sprintf("sent to %s instead of its source %s (redirected)", p.To, queue)
}

// redrivenSet is the assignment that marks entries redriven; a redirected
// redrive also records the target queue (redirected_to), which the ledger
// counts as the entries' way out of their source.
func redrivenSet(p Params) string {
	set := `state = 'redriven', redrive_count = redrive_count + 1`
	if p.To != "" {
		set += `, redirected_to = CASE WHEN queue = '` + strings.ReplaceAll(p.To, "'", "''") + `' THEN '' ELSE '` +
			strings.ReplaceAll(p.To, "'", "''") + `' END`
	}
	return set
}

// redirectTargets resolves the one target of a redirected redrive, before
// anything is sent, for every source queue of the selection. A target that
// does not exist refuses the redrive with nothing changed, audited, dry
// run or not.
func (rd *Redriver) redirectTargets(ctx context.Context, d decision, p Params, queues []string, counts map[string]int64, out map[string]Publisher) error {
	t, err := p.Target(ctx, p.To)
	if err != nil {
		var n int64
		for _, c := range counts {
			n += c
		}
		detail := fmt.Sprintf("redirect to %s (from %s): %v", p.To, strings.Join(queues, ", "), err)
		if aerr := rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeFailed, p.DryRun, nil, detail)); aerr != nil {
			return errors.Join(err, aerr)
		}
		return fmt.Errorf("redrive --to %s (%d pending entries of %s selected): %w; nothing was sent or changed", p.To, n, strings.Join(queues, ", "), err)
	}
	for _, q := range queues {
		out[q] = t
	}
	return nil
}
