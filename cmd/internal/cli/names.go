package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/nearest"
)

// A selection that names a queue or a dead-letter reason nobody knows
// selects nothing, and "nothing to redrive", exit 0, reads as an empty
// DLQ: an operator who typed orders.craeted believes the work is done.
// So a name is checked against what Lily knows before anything runs — a
// queue of the configuration or of the catalog (entries or ledger), a
// reason Lily writes or one an entry of the catalog carries — and an
// unknown one is refused, exit 2, with the nearest known name and the
// known ones.

// checkQueue refuses queue (given as flag) unless the configuration or
// the catalog knows it. An empty queue selects every queue.
func (e *dlqEnv) checkQueue(ctx context.Context, flag, queue string) error {
	if queue == "" {
		return nil
	}
	var configured []string
	if e.hasCfg {
		for _, q := range e.cfg.Queues {
			configured = append(configured, q.Name)
		}
	}
	if slices.Contains(configured, queue) {
		return nil
	}
	rows, err := e.ledger.Rows(ctx, nil)
	if err != nil {
		return fmt.Errorf("check --%s %q against the catalog's queues: %w", flag, queue, err)
	}
	var cataloged []string
	for _, r := range rows {
		if r.Queue == queue {
			return nil
		}
		if !slices.Contains(configured, r.Queue) {
			cataloged = append(cataloged, r.Queue)
		}
	}
	known := append(slices.Clone(configured), cataloged...)
	msg := fmt.Sprintf("--%s %s: unknown queue", flag, queue)
	if s := nearest.Name(queue, known, 3); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	switch {
	case len(configured) > 0:
		msg += "; configured: " + strings.Join(configured, ", ")
	case e.hasCfg:
		msg += "; the configuration has no [[queue]]"
	default:
		msg += "; give --config to check it against the configured queues"
	}
	if len(cataloged) > 0 {
		msg += "; in the catalog only: " + strings.Join(cataloged, ", ")
	} else if len(configured) == 0 {
		msg += "; the catalog knows no queue yet"
	}
	return usagef("%s", msg)
}

// checkReason refuses a dead-letter reason (given as flag) that Lily does
// not write and no entry of the catalog carries.
func (e *dlqEnv) checkReason(ctx context.Context, flag, reason string) error {
	if reason == "" || evidence.Reason(reason).Valid() {
		return nil
	}
	var known []string
	for _, r := range evidence.Reasons() {
		known = append(known, string(r))
	}
	groups, err := e.cat.Group(ctx, "reason", catalog.Filter{})
	if err != nil {
		return fmt.Errorf("check --%s %q against the catalog's reasons: %w", flag, reason, err)
	}
	for _, g := range groups {
		if g.Key == reason {
			return nil
		}
		if !slices.Contains(known, g.Key) && g.Key != "" {
			known = append(known, g.Key)
		}
	}
	msg := fmt.Sprintf("--%s %s: unknown dead-letter reason", flag, reason)
	if s := nearest.Name(reason, known, 3); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return usagef("%s; known: %s", msg, strings.Join(known, ", "))
}

// checkNames checks the queue and reason of a selection (see checkQueue,
// checkReason).
func (s *selectFlags) checkNames(ctx context.Context, e *dlqEnv) error {
	if err := e.checkQueue(ctx, "queue", s.queue); err != nil {
		return err
	}
	return e.checkReason(ctx, s.reasonFlag, s.reason)
}
