package catalog

// The per-event rows keep one row per message identity: kind "accepted"
// from when it is counted accepted, turned into kind "acked" (at: the ack)
// when it is counted acked — so an acked message is known as accepted
// too, and the ledger keeps one row per message, not two. A message acked
// without an accepted row (accepted before its row was pruned, or rows of
// an earlier Lily that kept two) gets an "acked" row of its own.

// countAcceptedSQL records (queue, "accepted", key, at) unless the key or
// its bare event ID (legacy: a row of an older Lily) is recorded as
// accepted or acked already; RowsAffected tells whether it did. The select
// list is cast so that PostgreSQL knows the parameters' types. Arguments:
// queue, key, at, queue, key, legacy.
const countAcceptedSQL = `INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT CAST(? AS TEXT), 'accepted', CAST(? AS TEXT), CAST(? AS BIGINT)
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger_events WHERE queue = ? AND kind IN ('accepted', 'acked') AND event_id IN (?, ?))
		ON CONFLICT DO NOTHING`

// ackAcceptedSQL turns the key's accepted row into its acked row, unless
// it (or its bare event ID) has one already. Arguments: at, queue, key,
// queue, key, legacy.
const ackAcceptedSQL = `UPDATE lily_ledger_events SET kind = 'acked', at = ?
		WHERE queue = ? AND kind = 'accepted' AND event_id = ?
		AND NOT EXISTS (SELECT 1 FROM lily_ledger_events e WHERE e.queue = ? AND e.kind = 'acked' AND e.event_id IN (?, ?))`

// countAckedSQL records (queue, "acked", key, at) for a key without an
// accepted row, unless the key or its bare event ID is recorded as acked
// already. Arguments: queue, key, at, queue, key, legacy.
const countAckedSQL = `INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT CAST(? AS TEXT), 'acked', CAST(? AS TEXT), CAST(? AS BIGINT)
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger_events WHERE queue = ? AND kind = 'acked' AND event_id IN (?, ?))
		ON CONFLICT DO NOTHING`
