// Package ledger is the conservation ledger of the catalog (docs/design.md §9):
// per queue, accepted = acked + dead_lettered + discarded + in_flight, and
// anything else is lost. It counts what the catalog cannot see by itself —
// the messages a broker transport accepts and acknowledges — through a
// transport wrapper (Accounted), which also parks the messages of an
// ordered queue in the catalog and holds a batch it could not count while
// the catalog is down; it keeps the per-event rows that count each message
// once, and prunes them past a horizon.
//
// A Ledger is built on a *catalog.Store and reads and writes the store's
// tables lily_ledger, lily_ledger_events and lily_ledger_pruned (the
// SQLite transport raises lily_ledger's counters in its own transactions,
// through catalogdb); a queue's dead letters are counted from the store's
// entries.
package ledger

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Row is one queue's conservation ledger (docs/design.md §9):
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
type Row struct {
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
	// Unknown is a shortfall that is not Lost because the transport could
	// not count what consumers of other processes hold (RabbitMQ without
	// its management API, transport.InFlightParts.Unknown): up to Unknown
	// messages may be held there. UnknownWhy says why they could not be
	// counted.
	Unknown    int64  `json:"unknown"`
	UnknownWhy string `json:"unknown_why,omitempty"`
}

// Balanced reports whether every accepted message is accounted for: none
// lost, none unknown.
func (r Row) Balanced() bool { return r.Lost == 0 && r.Unknown == 0 }

// Ledger is the ledger of one catalog store. Its methods are safe for
// concurrent use; its one setting, the deduplication horizon, is its own
// (SetHorizon).
type Ledger struct {
	store   *catalog.Store
	db      *catalogdb.DB
	horizon atomic.Int64 // nanoseconds; 0 = DefaultHorizon
	legacy  atomic.Int32 // PostgreSQL: rows of an older Lily left (hasLegacy)
}

// New returns the ledger of store.
func New(store *catalog.Store) *Ledger {
	return &Ledger{store: store, db: catalogdb.Of(store)}
}

// Rows computes the ledger of every queue known to the catalog. The
// in-flight figure comes from inflight (the transport's own count of
// messages it still holds); with nil it is taken as zero. When inflight
// also counts dead letters not yet ingested from a broker
// (transport.DeadLetterCounter), they are added to dead_lettered.
//
// The catalog's counts and the transport's in-flight count are separate
// reads, and a message settled between them would be counted in neither
// (a consumer's ack moves it from in flight to acked): Rows reads the
// catalog's counts again after the in-flight count and, when they moved,
// reads both again — up to rowsReads times — so that a ledger read while
// consumers run shows no message lost that was only moving.
func (l *Ledger) Rows(ctx context.Context, inflight transport.InFlightCounter) ([]Row, error) {
	rows, err := l.catalogRows(ctx)
	if err != nil {
		return nil, err
	}
	for read := 1; ; read++ {
		out, err := l.addInFlight(ctx, rows, inflight)
		if err != nil {
			return nil, err
		}
		if inflight == nil || read == rowsReads {
			return out, nil // nothing else was read, or reading again would not settle
		}
		after, err := l.catalogRows(ctx)
		if err != nil {
			return nil, err
		}
		if sameCounts(rows, after) {
			return out, nil
		}
		rows = after
	}
}

// rowsReads bounds how often Rows reads a ledger whose catalog counts
// move while it reads (docs/ledger.md): a settling burst is over in one
// more read, and under steady traffic every read moves, so more reads
// would only multiply a metrics scrape's queries.
const rowsReads = 3

// sameCounts reports whether two readings of the catalog's counts agree.
func sameCounts(a, b map[string]*Row) bool {
	if len(a) != len(b) {
		return false
	}
	for q, r := range a {
		o, ok := b[q]
		if !ok || *o != *r {
			return false
		}
	}
	return true
}

// catalogRows reads the catalog's side of every queue's ledger: its
// counters, its entries by state and the foreign queues' handed-back
// entries.
func (l *Ledger) catalogRows(ctx context.Context) (map[string]*Row, error) {
	rows := map[string]*Row{}
	get := func(q string) *Row {
		r, ok := rows[q]
		if !ok {
			r = &Row{Queue: q}
			rows[q] = r
		}
		return r
	}
	lr, err := l.db.QueryContext(ctx, catalogdb.LedgerCountsSQL(l.db.Dialect()))
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
	sr, err := l.db.QueryContext(ctx, `SELECT queue, state, COUNT(*), CAST(SUM(CASE WHEN redirected_to <> '' THEN 1 ELSE 0 END) AS BIGINT) FROM lily_dlq_entries GROUP BY queue, state`)
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
		switch catalog.State(st) {
		case catalog.StatePending, catalog.StateParked, catalog.StateNeedsManual:
			r.DeadLettered += n
		case catalog.StateDiscarded, catalog.StateErased:
			r.Discarded += n
		case catalog.StateRedriven:
			r.Redirected += redirected
		}
	}
	sr.Close()
	if err := sr.Err(); err != nil {
		return nil, err
	}
	if err := l.foreignHandedBack(ctx, get); err != nil {
		return nil, err
	}
	return rows, nil
}

// addInFlight completes the catalog's rows with what the transport holds,
// and computes what is lost. rows is not modified.
func (l *Ledger) addInFlight(ctx context.Context, rows map[string]*Row, inflight transport.InFlightCounter) ([]Row, error) {
	out := make([]Row, 0, len(rows))
	for _, cr := range rows {
		r := new(Row)
		*r = *cr
		unknown := ""
		if b, ok := inflight.(transport.InFlightBreakdown); ok {
			p, err := b.InFlightParts(ctx, r.Queue)
			if err != nil {
				return nil, err
			}
			unknown = p.Unknown
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
		if unknown != "" && r.Lost > 0 {
			// Consumers of other processes may hold them: not lost, unknown.
			r.Unknown, r.UnknownWhy, r.Lost = r.Lost, unknown, 0
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, nil
}

// foreignHandedBack adds to the ledger rows of the foreign dead-letter
// queues, as acked, the entries redriven to their origin: a message that
// left a foreign DLQ ends in the catalog as pending, discarded (with a
// record) or redriven — handed back to the queue it came from, outside
// Lily's ledger. So accepted (counted at ingest, in the ingest's
// transaction) = acked (redriven) + dead_lettered (pending) + discarded.
func (l *Ledger) foreignHandedBack(ctx context.Context, get func(string) *Row) error {
	rows, err := l.db.QueryContext(ctx, `SELECT e.queue, COUNT(*) FROM lily_dlq_entries e JOIN lily_foreign_queues f ON f.queue = e.queue
		WHERE e.state = 'redriven' GROUP BY e.queue`)
	if err != nil {
		return fmt.Errorf("catalog: ledger of foreign queues: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return err
		}
		get(q).Acked += n
	}
	return rows.Err()
}

// AddCounts adds to queue's accepted and acked ledger counters in a
// transaction of its own, for a transport that counts outside the
// catalog's database (in the SQLite transport's own transaction, use
// AddCountsTx).
//
// On PostgreSQL it is one statement outside any transaction, under no
// shared lock (catalogdb.AddCounts).
func (l *Ledger) AddCounts(ctx context.Context, queue string, accepted, acked int64) error {
	if l.db.Dialect() == catalogdb.Postgres {
		return catalogdb.AddCounts(ctx, l.db, queue, accepted, acked)
	}
	return l.db.WithTx(ctx, func(tx *catalogdb.Tx) error { return catalogdb.AddCounts(ctx, tx, queue, accepted, acked) })
}
