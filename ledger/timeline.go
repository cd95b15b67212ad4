package ledger

import (
	"context"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
)

// EventTimeline is what the ledger's per-message rows (lily_ledger_events)
// tell over time, per queue and bucket of a catalog.Span.
//
// The ledger does not keep when an acked message was accepted: its
// counters (lily_ledger) are running totals without a time, and a
// message's row holds one time — its acceptance until it is acked, then
// its ack (count.go). So accepted messages per bucket, the inflow, cannot
// be recovered; what can is each message once, at its latest event: Acked
// at the ack, Unacked (accepted, not acked: in flight, dead-lettered or
// lost) at the acceptance. Their sum is the inflow where consumers ack
// within a bucket. Only broker transports write these rows (the SQLite
// transport raises the counters alone), and rows older than the
// deduplication horizon are pruned (prune.go).
type EventTimeline struct {
	Acked   map[string][]int64
	Unacked map[string][]int64
}

// Timeline counts the ledger's rows by kind per queue and bucket of sp;
// queue, when not empty, restricts it to that queue.
func (l *Ledger) Timeline(ctx context.Context, queue string, sp catalog.Span) (EventTimeline, error) {
	var out EventTimeline
	var err error
	if out.Acked, err = catalogdb.CountBuckets(ctx, l.db, sp, queue, "lily_ledger_events", "at", "kind = 'acked'"); err != nil {
		return out, err
	}
	out.Unacked, err = catalogdb.CountBuckets(ctx, l.db, sp, queue, "lily_ledger_events", "at", "kind = 'accepted'")
	return out, err
}
