package catalog

import (
	"context"
	"fmt"
	"sort"

	"github.com/lily-mq/lily/transport"
)

// LedgerRow is one queue's conservation ledger (DESIGN §9):
// accepted = acked + dead_lettered + discarded + in_flight; anything else
// is Lost (positive: messages unaccounted for; negative: invented).
//
// In flight is everything some holder still has — the queue, its retry
// buckets, a consumer in any process, the broker's dead-letter process —
// and, when the transport can tell (transport.InFlightBreakdown), it is
// broken down into InFlightReady, InFlightRetrying, InFlightUnacked and
// InFlightDLX (the rest of InFlight, if any, is not broken down; all four
// are 0 for a transport without a breakdown, such as SQLite). Lost is only
// what nobody holds.
type LedgerRow struct {
	Queue        string `json:"queue"`
	Accepted     int64  `json:"accepted"`
	Acked        int64  `json:"acked"`
	DeadLettered int64  `json:"dead_lettered"`
	Discarded    int64  `json:"discarded"`
	InFlight     int64  `json:"in_flight"`
	// InFlightReady: waiting in the queue (Kafka: past the committed
	// offsets of the main topic, fetched or not).
	InFlightReady int64 `json:"in_flight_ready"`
	// InFlightRetrying: waiting in the retry buckets or retry topics.
	InFlightRetrying int64 `json:"in_flight_retrying"`
	// InFlightUnacked: delivered to a consumer of any process, not yet
	// acknowledged (RabbitMQ messages_unacknowledged).
	InFlightUnacked int64 `json:"in_flight_unacked"`
	// InFlightDLX: dead-lettered by the broker, not yet confirmed by the
	// dead-letter queue (RabbitMQ messages_dlx).
	InFlightDLX int64 `json:"in_flight_dlx"`
	// Redirected counts entries redriven to another queue ('lily dlq
	// redrive --to'): they left this queue's flow for good and were
	// accepted by the other queue.
	Redirected int64 `json:"redirected"`
	Lost       int64 `json:"lost"`
}

// Balanced reports whether every accepted message is accounted for.
func (r LedgerRow) Balanced() bool { return r.Lost == 0 }

// Ledger computes the ledger of every queue known to the catalog. The
// in-flight figure comes from inflight (the transport's own count of
// messages it still holds); with nil it is taken as zero. When inflight
// also counts dead letters not yet ingested from a broker
// (transport.DeadLetterCounter), they are added to dead_lettered.
func (s *Store) Ledger(ctx context.Context, inflight transport.InFlightCounter) ([]LedgerRow, error) {
	rows := map[string]*LedgerRow{}
	get := func(q string) *LedgerRow {
		r, ok := rows[q]
		if !ok {
			r = &LedgerRow{Queue: q}
			rows[q] = r
		}
		return r
	}
	lr, err := s.db.QueryContext(ctx, `SELECT queue, accepted, acked FROM lily_ledger`)
	if err != nil {
		return nil, fmt.Errorf("catalog: ledger: %w", err)
	}
	for lr.Next() {
		var q string
		var acc, ack int64
		if err := lr.Scan(&q, &acc, &ack); err != nil {
			lr.Close()
			return nil, err
		}
		r := get(q)
		r.Accepted, r.Acked = acc, ack
	}
	lr.Close()
	if err := lr.Err(); err != nil {
		return nil, err
	}
	sr, err := s.db.QueryContext(ctx, `SELECT queue, state, COUNT(*), CAST(SUM(CASE WHEN redirected_to <> '' THEN 1 ELSE 0 END) AS BIGINT) FROM lily_dlq_entries GROUP BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("catalog: ledger: %w", err)
	}
	for sr.Next() {
		var q, st string
		var n, redirected int64
		if err := sr.Scan(&q, &st, &n, &redirected); err != nil {
			sr.Close()
			return nil, err
		}
		r := get(q)
		switch State(st) {
		case StatePending, StateParked, StateNeedsManual:
			r.DeadLettered += n
		case StateDiscarded, StateErased:
			r.Discarded += n
		case StateRedriven:
			r.Redirected += redirected
		}
	}
	sr.Close()
	if err := sr.Err(); err != nil {
		return nil, err
	}
	if err := s.foreignHandedBack(ctx, get); err != nil {
		return nil, err
	}
	out := make([]LedgerRow, 0, len(rows))
	for _, r := range rows {
		if b, ok := inflight.(transport.InFlightBreakdown); ok {
			p, err := b.InFlightParts(ctx, r.Queue)
			if err != nil {
				return nil, err
			}
			r.InFlight = p.Total()
			r.InFlightReady, r.InFlightRetrying, r.InFlightUnacked, r.InFlightDLX = p.Ready, p.Retrying, p.Unacked, p.DeadLettering
		} else if inflight != nil {
			n, err := inflight.InFlight(ctx, r.Queue)
			if err != nil {
				return nil, err
			}
			r.InFlight = n
		}
		// Dead letters still waiting in a broker DLQ are dead-lettered too.
		if dc, ok := inflight.(transport.DeadLetterCounter); ok {
			n, err := dc.DeadLetterDepth(ctx, r.Queue)
			if err != nil {
				return nil, err
			}
			r.DeadLettered += n
		}
		r.Lost = r.Accepted - r.Acked - r.DeadLettered - r.Discarded - r.Redirected - r.InFlight
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, nil
}
