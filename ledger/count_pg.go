package ledger

// Counting on PostgreSQL: one statement per batch, no transaction of its
// own, no advisory lock. Each statement's exactness under read committed
// rests on lily_ledger_events' primary key (queue, kind, event_id), not on
// what a snapshot saw; docs/catalog.md ("The ledger's counts") walks
// through the races.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// pgBatchRows is unnest over three text arrays: queue, key, and the key's
// bare event ID (a row of an older Lily); $4 is the time (Unix ms).
const pgBatchRows = `u AS (SELECT * FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[])) AS u(q, k, legacy))`

// pgAddDeltas turns the CTE c(queue, n) of rows recorded into counter
// deltas of this connection's backend (lily_ledger_deltas), makes sure
// lily_ledger names the queue (DO NOTHING takes no row lock on an
// existing row), and returns the total. %s is the counter raised.
const pgAddDeltas = `,
	q AS (INSERT INTO lily_ledger(queue, accepted, acked) SELECT queue, 0, 0 FROM c ON CONFLICT (queue) DO NOTHING),
	d AS (INSERT INTO lily_ledger_deltas(queue, writer, %[1]s) SELECT queue, pg_backend_pid(), n FROM c
		ON CONFLICT (queue, writer) DO UPDATE SET %[1]s = lily_ledger_deltas.%[1]s + excluded.%[1]s)
	SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM c`

// pgCountAcceptedSQL records a batch as accepted: a key counts unless it
// (or its bare event ID) has an accepted or acked row. Two writers of one
// new key both pass NOT EXISTS; the primary key lets one insert and makes
// the other wait for its commit and do nothing (ON CONFLICT DO NOTHING),
// so only the rows really inserted (RETURNING) are counted.
var pgCountAcceptedSQL = `WITH ` + pgBatchRows + `,
	ins AS (INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT u.q, 'accepted', u.k, $4 FROM u
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger_events e WHERE e.queue = u.q AND e.kind IN ('accepted', 'acked') AND e.event_id IN (u.k, u.legacy))
		ON CONFLICT DO NOTHING RETURNING queue),
	c AS (SELECT queue, COUNT(*) AS n FROM ins GROUP BY queue)` + fmt.Sprintf(pgAddDeltas, "accepted")

// pgCountAckedSQL records a batch as acked: a key's accepted row turns
// acked (upd), and a key without one gets an acked row of its own (ins),
// unless the key (or its bare event ID) is acked already. The UPDATE
// waits for a concurrent writer of the same row and re-checks kind =
// 'accepted' on the committed version; the INSERT of (queue, 'acked',
// key) conflicts with any acked row, committed or in progress, whatever
// this statement's snapshot saw.
var pgCountAckedSQL = `WITH ` + pgBatchRows + `,
	upd AS (UPDATE lily_ledger_events e SET kind = 'acked', at = $4 FROM u
		WHERE e.queue = u.q AND e.kind = 'accepted' AND e.event_id = u.k
		AND NOT EXISTS (SELECT 1 FROM lily_ledger_events a WHERE a.queue = u.q AND a.kind = 'acked' AND a.event_id IN (u.k, u.legacy))
		RETURNING e.queue, e.event_id),
	ins AS (INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT u.q, 'acked', u.k, $4 FROM u
		WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.queue = u.q AND upd.event_id = u.k)
		AND NOT EXISTS (SELECT 1 FROM lily_ledger_events a WHERE a.queue = u.q AND a.kind = 'acked' AND a.event_id IN (u.k, u.legacy))
		ON CONFLICT DO NOTHING RETURNING queue),
	c AS (SELECT queue, COUNT(*) AS n FROM (SELECT queue FROM upd UNION ALL SELECT queue FROM ins) x GROUP BY queue)` + fmt.Sprintf(pgAddDeltas, "acked")

// countManyPG is countMany on PostgreSQL: one round trip for the whole
// batch, whatever its size and its queues. Keys repeated within the batch
// are sent once.
func (l *Ledger) countManyPG(ctx context.Context, kind string, byQueue map[string][]string, now time.Time) (int64, error) {
	var qs, ks, legacies []string
	type qk struct{ q, k string }
	seen := map[qk]bool{}
	for queue, keys := range byQueue {
		for _, key := range keys {
			if seen[qk{queue, key}] {
				continue
			}
			seen[qk{queue, key}] = true
			legacy, _, _ := strings.Cut(key, keySep)
			qs, ks, legacies = append(qs, queue), append(ks, key), append(legacies, legacy)
		}
	}
	if len(ks) == 0 {
		return 0, nil
	}
	q := pgCountAcceptedSQL
	if kind == "acked" {
		q = pgCountAckedSQL
	}
	var n int64
	if err := l.db.QueryRowContext(ctx, q, qs, ks, legacies, now.UnixMilli()).Scan(&n); err != nil {
		return 0, fmt.Errorf("catalog: ledger %s (%d messages): %w", kind, len(ks), err)
	}
	return n, nil
}
