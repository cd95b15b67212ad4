package ledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

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

// Key is the identity the ledger counts a broker message by: its
// event ID and the first 16 bytes of its body's SHA-256. The event ID
// alone is not enough: foreign producers reuse message IDs (two different
// bodies under one message_id are two messages, and both are counted), and
// the catalog keeps two such dead letters apart too (catalogdb's duplicate check), so the
// two agree and the ledger balances. Two copies with the same ID and the
// same bytes are one message (a producer's retried send, a redelivery).
func Key(eventID string, body []byte) string {
	sum := sha256.Sum256(body)
	return eventID + keySep + hex.EncodeToString(sum[:16])
}

// keySep separates the event ID from the body digest in a ledger key;
// a row without it was written by an older Lily and holds the bare event ID.
const keySep = "\x1f"

// countDeliveries counts ds by queue under kind. It first looks the keys
// up without a write lock: in the common case (messages published by
// lily.Publish, redeliveries, retry copies) all were counted before and
// nothing is written; the others are counted in one transaction.
// It returns how many rows it recorded.
func (l *Ledger) countDeliveries(ctx context.Context, kind string, ds []*transport.Delivery, now time.Time) (int64, error) {
	if l.db.Dialect() == catalogdb.Postgres {
		// One statement writes nothing for keys counted before: no
		// look-up first, no per-message round trip.
		byQueue := map[string][]string{}
		for _, d := range ds {
			byQueue[d.Queue] = append(byQueue[d.Queue], Key(d.EventID, d.Body))
		}
		return l.countManyPG(ctx, kind, byQueue, now)
	}
	// An acked message was accepted too (see above: one row per message).
	kinds := []any{kind, kind}
	if kind == "accepted" {
		kinds = []any{"accepted", "acked"}
	}
	stmt, err := l.db.PrepareContext(ctx, `SELECT 1 FROM lily_ledger_events WHERE queue = ? AND kind IN (?, ?) AND event_id IN (?, ?)`)
	if err != nil {
		return 0, fmt.Errorf("catalog: ledger: %w", err)
	}
	defer stmt.Close()
	byQueue := map[string][]string{}
	for _, d := range ds {
		key := Key(d.EventID, d.Body)
		var one int
		switch err := stmt.QueryRowContext(ctx, d.Queue, kinds[0], kinds[1], key, d.EventID).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			byQueue[d.Queue] = append(byQueue[d.Queue], key)
		case err != nil:
			return 0, fmt.Errorf("catalog: ledger %s %s: %w", d.Queue, kind, err)
		}
	}
	return l.countMany(ctx, kind, byQueue, now)
}

// count records events of kind for queue now, adding to the ledger counter
// only the keys (Key) not recorded before.
func (l *Ledger) count(ctx context.Context, queue, kind string, keys []string) error {
	_, err := l.countMany(ctx, kind, map[string][]string{queue: keys}, time.Now())
	return err
}

// countMany records events of kind for every queue of byQueue in one
// transaction, at now, adding to each queue's counter only the keys not
// recorded before (nor, for a key with a body digest, its bare event ID,
// recorded by an older Lily). It returns how many rows it added.
func (l *Ledger) countMany(ctx context.Context, kind string, byQueue map[string][]string, now time.Time) (int64, error) {
	empty := true
	for _, keys := range byQueue {
		empty = empty && len(keys) == 0
	}
	if empty {
		return 0, nil
	}
	if l.db.Dialect() == catalogdb.Postgres {
		return l.countManyPG(ctx, kind, byQueue, now)
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("catalog: ledger: %w", err)
	}
	defer tx.Rollback()
	var insert, ack *sql.Stmt
	if kind == "accepted" {
		insert, err = tx.PrepareContext(ctx, countAcceptedSQL)
	} else {
		insert, err = tx.PrepareContext(ctx, countAckedSQL)
		if err == nil {
			if ack, err = tx.PrepareContext(ctx, ackAcceptedSQL); err == nil {
				defer ack.Close()
			}
		}
	}
	if err != nil {
		return 0, fmt.Errorf("catalog: ledger: %w", err)
	}
	defer insert.Close()
	at := now.UnixMilli()
	var total int64
	for queue, keys := range byQueue {
		var added int64
		for _, key := range keys {
			legacy, _, _ := strings.Cut(key, keySep)
			if ack != nil {
				res, err := ack.ExecContext(ctx, at, queue, key, queue, key, legacy)
				if err != nil {
					return 0, fmt.Errorf("catalog: ledger %s %s: %w", queue, kind, err)
				}
				if n, _ := res.RowsAffected(); n > 0 {
					added += n
					continue
				}
			}
			res, err := insert.ExecContext(ctx, queue, key, at, queue, key, legacy)
			if err != nil {
				return 0, fmt.Errorf("catalog: ledger %s %s: %w", queue, kind, err)
			}
			n, _ := res.RowsAffected()
			added += n
		}
		if added == 0 {
			continue // all seen before (the common case on receive): no write
		}
		var accepted, acked int64
		if kind == "accepted" {
			accepted = added
		} else {
			acked = added
		}
		if err := catalogdb.AddCounts(ctx, tx, queue, accepted, acked); err != nil {
			return 0, err
		}
		total += added
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("catalog: ledger: %w", err)
	}
	return total, nil
}

func (l *Ledger) ensureQueue(ctx context.Context, queue string) error {
	return l.AddCounts(ctx, queue, 0, 0)
}

// ackedChunk is the most keys one statement of AckedSince asks for.
const ackedChunk = 500

// AckedSince counts the messages of queue, named by their keys (Key),
// that the ledger recorded acked at or after since: how a redrive job's
// sample is proved on a broker, whose queue cannot be looked into (the
// wrapper records each ack before the broker's).
func (l *Ledger) AckedSince(ctx context.Context, queue string, since time.Time, keys []string) (int, error) {
	acked := 0
	for start := 0; start < len(keys); start += ackedChunk {
		chunk := keys[start:min(start+ackedChunk, len(keys))]
		args := []any{queue, since.UnixMilli()}
		for _, k := range chunk {
			args = append(args, k)
		}
		var n int
		if err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_ledger_events WHERE queue = ? AND kind = 'acked' AND at >= ?
				AND event_id IN (`+catalogdb.Placeholders(len(chunk))+`)`, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("catalog: sample acks in %s: %w", queue, err)
		}
		acked += n
	}
	return acked, nil
}

// Unacked returns, sorted, the event IDs of queue whose messages the
// ledger counts as accepted and not acked (their per-event row is still
// "accepted"): settled elsewhere (dead-lettered, discarded), still held
// by the broker, or lost. Rows pruned past the horizon are not among them.
func (l *Ledger) Unacked(ctx context.Context, queue string) ([]string, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT event_id FROM lily_ledger_events WHERE queue = ? AND kind = 'accepted' ORDER BY event_id`, queue)
	if err != nil {
		return nil, fmt.Errorf("catalog: ledger unacked of %s: %w", queue, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("catalog: ledger unacked of %s: %w", queue, err)
		}
		id, _, _ := strings.Cut(key, keySep)
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
