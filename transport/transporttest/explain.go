package transporttest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// explainCap bounds each list of event IDs in an explanation: enough to
// look a few up in the log, not so many that a thousand-message run buries
// the failure.
const explainCap = 20

// Conservation is what a conservation check knows of one queue when it
// fails, gathered so that Explain can print it: a failure in CI is then
// understood from its log alone. Every field is optional.
type Conservation struct {
	Queue string
	// Row is the queue's ledger row; nil when the check keeps no ledger.
	Row *ledger.Row
	// Broker states the broker's own counts (BrokerCounts); empty when
	// the check has none.
	Broker string
	// Published lists the event IDs published to the queue; nil when
	// the check does not know them.
	Published []string
	// Ended maps an event ID to every place it was seen to end in
	// ("acked", "in the DLQ", "ready", ...), once per sighting: an ID
	// with two is seen twice, an ID not in Published is unknown.
	Ended map[string][]string
	// Unsettled lists event IDs found unsettled by other means, by what
	// found them (LedgerUnsettled): for a check that knows no Published.
	Unsettled map[string][]string
}

// Explain renders c: the ledger row, the broker's counts, and the event
// IDs that differ — published but ended nowhere, ended more than once,
// ended but never published — each list capped at 20 with its total.
func (c Conservation) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "conservation of %s, explained:\n", c.Queue)
	if r := c.Row; r != nil {
		fmt.Fprintf(&b, "  ledger: accepted %d, acked %d, dead-lettered %d, discarded %d, in flight %d, lost %d",
			r.Accepted, r.Acked, r.DeadLettered, r.Discarded, r.InFlight, r.Lost)
		if r.Redirected != 0 {
			fmt.Fprintf(&b, ", redirected %d", r.Redirected)
		}
		if r.Unknown != 0 {
			fmt.Fprintf(&b, ", unknown %d (%s)", r.Unknown, r.UnknownWhy)
		}
		b.WriteString("\n")
	}
	if c.Broker != "" {
		fmt.Fprintf(&b, "  broker: %s\n", c.Broker)
	}
	if c.Published != nil {
		var missing, twice, unknown []string
		known := map[string]bool{}
		for _, id := range c.Published {
			if known[id] {
				continue // published twice under one ID: judged once
			}
			known[id] = true
			switch n := len(c.Ended[id]); {
			case n == 0:
				missing = append(missing, id)
			case n > 1:
				twice = append(twice, fmt.Sprintf("%s (%s)", id, strings.Join(c.Ended[id], ", ")))
			}
		}
		for id, where := range c.Ended {
			if !known[id] {
				unknown = append(unknown, fmt.Sprintf("%s (%s)", id, strings.Join(where, ", ")))
			}
		}
		slices.Sort(twice)
		slices.Sort(unknown)
		fmt.Fprintf(&b, "  published %d distinct event IDs, %d ended somewhere\n", len(known), len(known)-len(missing))
		writeIDs(&b, "published, ended nowhere (neither acked nor dead-lettered)", missing)
		writeIDs(&b, "seen more than once", twice)
		writeIDs(&b, "never published (unknown)", unknown)
	}
	labels := make([]string, 0, len(c.Unsettled))
	for l := range c.Unsettled {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		writeIDs(&b, l, c.Unsettled[l])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// writeIDs writes one capped list of IDs with its total; an empty list
// is written too, so that "none" is stated rather than left to guess.
func writeIDs(b *strings.Builder, label string, ids []string) {
	fmt.Fprintf(b, "  %s: %d", label, len(ids))
	if len(ids) == 0 {
		b.WriteString("\n")
		return
	}
	shown := ids[:min(len(ids), explainCap)]
	fmt.Fprintf(b, " [%s", strings.Join(shown, " "))
	if len(ids) > len(shown) {
		fmt.Fprintf(b, " … and %d more", len(ids)-len(shown))
	}
	b.WriteString("]\n")
}

// BrokerCounts asks tr (a transport, a counter, or nil) for what it can
// count of queue: its in-flight messages, broken down by holder where it
// can tell, and the dead letters waiting in the broker. Errors are part
// of the text: an explanation does not fail.
func BrokerCounts(ctx context.Context, tr any, queue string) string {
	var parts []string
	switch c := tr.(type) {
	case transport.InFlightBreakdown:
		p, err := c.InFlightParts(ctx, queue)
		if err != nil {
			parts = append(parts, fmt.Sprintf("in flight: %v", err))
			break
		}
		s := fmt.Sprintf("in flight %d (ready %d, retrying %d, unacked %d, dead-lettering %d, other %d)",
			p.Total(), p.Ready, p.Retrying, p.Unacked, p.DeadLettering, p.Other)
		if p.Unknown != "" {
			s += "; other processes' deliveries not counted: " + p.Unknown
		}
		parts = append(parts, s)
	case transport.InFlightCounter:
		n, err := c.InFlight(ctx, queue)
		if err != nil {
			parts = append(parts, fmt.Sprintf("in flight: %v", err))
		} else {
			parts = append(parts, fmt.Sprintf("in flight %d", n))
		}
	default:
		parts = append(parts, "cannot count in-flight messages")
	}
	if c, ok := tr.(transport.DeadLetterCounter); ok {
		n, err := c.DeadLetterDepth(ctx, queue)
		if err != nil {
			parts = append(parts, fmt.Sprintf("dead letters waiting: %v", err))
		} else {
			parts = append(parts, fmt.Sprintf("dead letters waiting in the broker %d", n))
		}
	}
	return strings.Join(parts, "; ")
}

// LedgerUnsettled lists the event IDs of queue that cat's store shows
// unsettled, by what shows them: the ledger's per-event rows still
// "accepted" (neither acked) whose event ID has no catalog entry — held
// by the broker or lost — and, when the catalog shares the SQLite
// transport's file, the messages that transport still holds. Errors are
// reported under their own label: an explanation does not fail.
func LedgerUnsettled(ctx context.Context, cat *catalog.Store, queue string) map[string][]string {
	out := map[string][]string{}
	inCatalog := map[string]bool{}
	if err := cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		inCatalog[e.EventID] = true
		return nil
	}); err != nil {
		out["catalog entries unreadable"] = []string{err.Error()}
	}
	accepted, err := ledger.New(cat).Unacked(ctx, queue)
	if err != nil {
		out["ledger rows unreadable"] = []string{err.Error()}
	}
	var notInCatalog []string
	for _, id := range accepted {
		if !inCatalog[id] {
			notInCatalog = append(notInCatalog, id)
		}
	}
	if len(notInCatalog) > 0 {
		out["accepted by the ledger, neither acked nor in the catalog"] = notInCatalog
	}
	if cat.Kind() == "sqlite" {
		var n int
		if err := cat.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'lily_messages'`).Scan(&n); err == nil && n == 1 {
			held, err := queryIDs(ctx, cat, `SELECT queue, event_id FROM lily_messages`, queue)
			if err != nil {
				out["SQLite messages unreadable"] = []string{err.Error()}
			} else if len(held) > 0 {
				out["still held by the SQLite transport"] = held
			}
		}
	}
	return out
}

// queryIDs runs query (selecting queue, event_id) and keeps queue's IDs,
// sorted: for the SQLite transport's table, read as the raw tools of this
// package read it (InsertRaw).
func queryIDs(ctx context.Context, cat *catalog.Store, query, queue string) ([]string, error) {
	rows, err := cat.DB().QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var q, id string
		if err := rows.Scan(&q, &id); err != nil {
			return nil, err
		}
		if q == queue {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, rows.Err()
}

// ExplainLedger explains queue's ledger row for a check that knows no
// published IDs: the row, the broker's counts from tr (a transport, a
// counter, or nil) and the event IDs cat's store shows unsettled.
func ExplainLedger(ctx context.Context, cat *catalog.Store, tr any, row ledger.Row) string {
	c := Conservation{Queue: row.Queue, Row: &row, Unsettled: LedgerUnsettled(ctx, cat, row.Queue)}
	if tr != nil {
		c.Broker = BrokerCounts(ctx, tr, row.Queue)
	}
	return c.Explain()
}

// explain gathers what conserve saw into a Conservation: each acked event,
// each dead letter in the DLQ, and each dead-lettering the runtime
// reported with no dead letter to show for it.
func (e *env) explain(published []string, events []lily.Event, dls map[string]DeadLetter, inFlight int64, counted bool) string {
	c := Conservation{Queue: e.queue, Published: published, Ended: map[string][]string{}}
	if counted && e.h.InFlight != nil {
		c.Broker = fmt.Sprintf("in flight %d (the harness's count)", inFlight)
	} else {
		c.Broker = BrokerCounts(e.ctx, e.base, e.queue)
	}
	for _, ev := range events {
		switch _, inDLQ := dls[ev.EventID]; {
		case ev.Kind == lily.EventAcked:
			c.Ended[ev.EventID] = append(c.Ended[ev.EventID], "acked")
		case ev.Kind == lily.EventDeadLettered && !inDLQ:
			c.Ended[ev.EventID] = append(c.Ended[ev.EventID], "dead-lettered, no dead letter")
		}
	}
	for id := range dls {
		c.Ended[id] = append(c.Ended[id], "in the DLQ")
	}
	return c.Explain()
}
