package ledger

// Counting on PostgreSQL: one statement per batch, no transaction of its
// own, no advisory lock. Each statement's exactness under read committed
// rests on the unique index of lily_ledger_events on (queue, event_id)
// (one row per message, PostgreSQL migration 7), not on what a snapshot
// saw; docs/catalog.md ("Locking on PostgreSQL, decision by decision")
// walks through the races.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// pgBatchRows is unnest over three text arrays: queue, key, and the key's
// bare event ID (a row of an older Lily); $4 is the time (Unix ms).
const pgBatchRows = `u AS (SELECT * FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[])) AS u(q, k, legacy))`

// pgAddDeltas turns the CTE c(queue, n) of rows recorded into counter
// deltas of this connection's backend (lily_ledger_deltas), makes sure
// lily_ledger names the queue (only when the snapshot sees no row: an
// insert that meets an existing row would wait for whoever updates it),
// and returns the total. %s is the counter raised.
const pgAddDeltas = `,
	q AS (INSERT INTO lily_ledger(queue, accepted, acked) SELECT queue, 0, 0 FROM c
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger WHERE lily_ledger.queue = c.queue) ORDER BY queue ON CONFLICT (queue) DO NOTHING),
	d AS (INSERT INTO lily_ledger_deltas(queue, writer, %[1]s) SELECT queue, pg_backend_pid(), n FROM c
		ON CONFLICT (queue, writer) DO UPDATE SET %[1]s = lily_ledger_deltas.%[1]s + excluded.%[1]s)
	SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM c`

// legacyNone is the condition "the key's bare event ID (u.legacy: a row
// written by an older Lily, which kept bare IDs) has no row of kinds %s":
// a scalar subquery with LIMIT, which PostgreSQL evaluates per row by the
// primary key instead of turning it into a join over the whole table.
// Legacy rows are never written any more, so what the statement's
// snapshot sees of them is final.
const legacyNone = `(SELECT 1 FROM lily_ledger_events l WHERE l.queue = u.q AND l.kind IN (%s) AND l.event_id = u.legacy LIMIT 1) IS NULL`

// pgCountAcceptedSQL records a batch as accepted: a key counts unless it
// has a row of any kind. The unique index on (queue, event_id) (migration
// 7) decides, not a snapshot: of two writers of one new key, one inserts
// and the other waits for its commit and does nothing (ON CONFLICT DO
// NOTHING), and a key whose row turned acked meanwhile still conflicts.
// Only the rows really inserted (RETURNING) are counted.
var pgCountAcceptedSQL = pgCountAccepted(`WHERE ` + fmt.Sprintf(legacyNone, `'accepted', 'acked'`))

// pgCountAcceptedLeanSQL is pgCountAcceptedSQL for a ledger without rows
// of an older Lily (Ledger.hasLegacy): no look-up of the bare event ID.
var pgCountAcceptedLeanSQL = pgCountAccepted("")

func pgCountAccepted(where string) string {
	return `WITH ` + pgBatchRows + `,
	ins AS (INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT u.q, 'accepted', u.k, $4 FROM u
		` + where + `
		ON CONFLICT DO NOTHING RETURNING queue),
	c AS (SELECT queue, COUNT(*) AS n FROM ins GROUP BY queue)` + fmt.Sprintf(pgAddDeltas, "accepted")
}

// pgCountAckedSQL records a batch as acked in one upsert on the key's
// unique (queue, event_id): a key without a row gets an acked row, a key
// whose row is accepted has it turned acked, a key acked already is left
// alone. ON CONFLICT DO UPDATE locks the key's row and evaluates its WHERE
// on the newest committed version, so two ackers of one key (a
// redelivery acked twice) count it once. RETURNING yields the rows
// inserted or turned, the ones counted.
var pgCountAckedSQL = pgCountAcked(`WHERE ` + fmt.Sprintf(legacyNone, `'acked'`))

// pgCountAckedLeanSQL is pgCountAckedSQL without the look-up of the bare
// event ID (see pgCountAcceptedLeanSQL).
var pgCountAckedLeanSQL = pgCountAcked("")

func pgCountAcked(where string) string {
	return `WITH ` + pgBatchRows + `,
	up AS (INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT u.q, 'acked', u.k, $4 FROM u
		` + where + `
		ON CONFLICT (queue, event_id) DO UPDATE SET kind = 'acked', at = excluded.at
		WHERE lily_ledger_events.kind = 'accepted'
		RETURNING queue),
	c AS (SELECT queue, COUNT(*) AS n FROM up GROUP BY queue)` + fmt.Sprintf(pgAddDeltas, "acked")
}

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
	// Every writer inserts and locks keys in one order, (queue, key):
	// two batches that share keys then wait for each other at most one
	// way, never in a cycle (a deadlock, which PostgreSQL breaks by
	// failing one of them).
	idx := make([]int, len(ks))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		return qs[i] < qs[j] || qs[i] == qs[j] && ks[i] < ks[j]
	})
	sq, sk, sl := make([]string, len(ks)), make([]string, len(ks)), make([]string, len(ks))
	for n, i := range idx {
		sq[n], sk[n], sl[n] = qs[i], ks[i], legacies[i]
	}
	qs, ks, legacies = sq, sk, sl
	legacy, err := l.hasLegacy(ctx)
	if err != nil {
		return 0, err
	}
	q := map[[2]bool]string{
		{false, true}: pgCountAcceptedSQL, {false, false}: pgCountAcceptedLeanSQL,
		{true, true}: pgCountAckedSQL, {true, false}: pgCountAckedLeanSQL,
	}[[2]bool{kind == "acked", legacy}]
	var n int64
	if err := l.db.QueryRowContext(ctx, q, qs, ks, legacies, now.UnixMilli()).Scan(&n); err != nil {
		return 0, fmt.Errorf("catalog: ledger %s (%d messages): %w", kind, len(ks), err)
	}
	return n, nil
}

// Legacy states of Ledger.legacy: not asked yet, rows of an older Lily
// present, none.
const (
	legacyUnknown int32 = iota
	legacyPresent
	legacyAbsent
)

// hasLegacy reports whether the PostgreSQL ledger still holds rows of an
// older Lily (bare event IDs), asking the database once (the partial
// index of schema step 8) and again after each prune while it does. None
// are written any more, so "none" is final.
func (l *Ledger) hasLegacy(ctx context.Context) (bool, error) {
	switch l.legacy.Load() {
	case legacyPresent:
		return true, nil
	case legacyAbsent:
		return false, nil
	}
	var has bool
	if err := l.db.QueryRowContext(ctx, catalogdb.LedgerHasLegacySQL).Scan(&has); err != nil {
		return false, fmt.Errorf("catalog: ledger: look for rows of an older Lily: %w", err)
	}
	if has {
		l.legacy.Store(legacyPresent)
	} else {
		l.legacy.Store(legacyAbsent)
	}
	return has, nil
}
