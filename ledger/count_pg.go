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
	q := pgCountAcceptedLeanSQL
	switch {
	case kind == "acked" && legacy:
		q = pgCountAckedSQL
	case kind == "acked":
		q = pgCountAckedLeanSQL
	case legacy:
		q = pgCountAcceptedSQL
	}
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

// pgSettleSQL counts a settle batch in one statement, on a ledger that
// trusts marks (trustsMarks): $1 queues, $2 keys, $3 whether the key is
// acked (else it is settled otherwise: retried, dead-lettered, released,
// and only needs to be known as accepted), $4 the time. An acked key
// without a row is inserted acked and counted accepted and acked; one
// whose row is accepted is turned and counted acked; one acked already is
// left alone. Any other key is inserted accepted and counted accepted
// unless it has a row. Whether a returned row was inserted or turned is
// its xmax: 0 for a row this statement inserted, the statement's own
// transaction for one it updated (the row lock of ON CONFLICT DO UPDATE).
// Exact for the reasons of pgCountAckedSQL: the unique (queue, event_id)
// index decides, and DO UPDATE re-reads the newest committed row.
const pgSettleSQL = `WITH u AS (SELECT * FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS boolean[])) AS u(q, k, ack)),
	up AS (INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT u.q, CASE WHEN u.ack THEN 'acked' ELSE 'accepted' END, u.k, $4 FROM u
		ON CONFLICT (queue, event_id) DO UPDATE SET kind = 'acked', at = excluded.at
		WHERE lily_ledger_events.kind = 'accepted' AND excluded.kind = 'acked'
		RETURNING queue, kind, xmax = 0 AS fresh),
	c AS (SELECT queue, COUNT(*) AS n, COUNT(*) FILTER (WHERE fresh) AS accepted, COUNT(*) FILTER (WHERE kind = 'acked') AS acked FROM up GROUP BY queue),
	q AS (INSERT INTO lily_ledger(queue, accepted, acked) SELECT queue, 0, 0 FROM c
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger WHERE lily_ledger.queue = c.queue) ORDER BY queue ON CONFLICT (queue) DO NOTHING),
	d AS (INSERT INTO lily_ledger_deltas(queue, writer, accepted, acked) SELECT queue, pg_backend_pid(), accepted, acked FROM c
		ON CONFLICT (queue, writer) DO UPDATE SET accepted = lily_ledger_deltas.accepted + excluded.accepted, acked = lily_ledger_deltas.acked + excluded.acked)
	SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM c`

// settlePG counts a settle batch on a ledger that trusts marks: acked
// keys and the keys settled otherwise, by queue, in one round trip (see
// pgSettleSQL). A key both acked and settled otherwise in one batch (two
// copies of a message) counts as acked. It returns how many rows it
// inserted or turned.
func (l *Ledger) settlePG(ctx context.Context, acked, other map[string][]string, now time.Time) (int64, error) {
	type qk struct{ q, k string }
	ack := map[qk]bool{}
	for queue, keys := range other {
		for _, k := range keys {
			ack[qk{queue, k}] = false
		}
	}
	for queue, keys := range acked {
		for _, k := range keys {
			ack[qk{queue, k}] = true
		}
	}
	if len(ack) == 0 {
		return 0, nil
	}
	keys := make([]qk, 0, len(ack))
	for k := range ack {
		keys = append(keys, k)
	}
	// One lock order for every writer (see countManyPG).
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].q < keys[j].q || keys[i].q == keys[j].q && keys[i].k < keys[j].k
	})
	qs, ks, acks := make([]string, len(keys)), make([]string, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		qs[i], ks[i], acks[i] = k.q, k.k, ack[k]
	}
	var n int64
	if err := l.db.QueryRowContext(ctx, pgSettleSQL, qs, ks, acks, now.UnixMilli()).Scan(&n); err != nil {
		return 0, fmt.Errorf("catalog: ledger: count a settle batch (%d messages): %w", len(ks), err)
	}
	return n, nil
}
