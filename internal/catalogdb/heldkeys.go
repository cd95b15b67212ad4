package catalogdb

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/evidence"
)

// HoldParkedKeys decides, in tx — the transaction that inserts the parked
// entries among entries (a consumer's diversion behind a held key,
// ordering park or block) — that each such entry's key is still held, under
// the key's row lock, and holds the key again if it is not.
//
// A consumer looks at a key outside any transaction (KeyState) and parks
// the message when the key is held; between that look and the parking's
// commit, an advance of the key (its allowed message processed, Unpark,
// ResumeKeys) can find nothing parked and free the key (delete its row).
// A parked entry without its key's row is never released. So, on
// PostgreSQL, the parking locks the rows of its keys first, in (queue,
// key) order, as every writer of several key rows does: if an advance
// locked the key first, the parking waits for its commit and then finds
// the key's row gone; an advance that comes after waits for the parking's
// commit and then finds the entry. A key found free is inserted again as
// waiting, with the key's first parked entry of the batch (the oldest: the
// batch is in arrival order) as its head and allowed message, in the mode
// the copy names (evidence.HeaderHoldMode; "park" if it names none):
// exactly the state an advance that had seen the entry would have left.
// Nobody is sending that entry yet, so the consumers' ResumeKeys sends it
// once redrive.ResumeGrace has passed. On SQLite the transaction is the one
// writer and the same statement decides.
//
// On PostgreSQL it must run before the entries are inserted and before any
// other lock on an entry's row (Store.Insert's duplicate check): an advance
// locks the key's row and then its entries', so a parking does the same.
func HoldParkedKeys(ctx context.Context, tx *Tx, entries []*Entry, now time.Time) error {
	return holdParkedKeys(ctx, tx, entries, now, "waiting")
}

// HoldImportedKeys is HoldParkedKeys for parked entries that an import
// (Store.Import) adds: a key the catalog does not hold is held — state
// held, its oldest parked entry of the batch as the head — not waiting.
// An export carries no held keys, and the import cannot tell whether the
// key's head was decided in the catalog the entries came from: nothing of
// the key moves until an operator unparks it (a head in state parked is
// released first), and a blocked key does not move on alone. Without
// this, the imported parked entries had no key: listed by nobody as held,
// released by nothing, while the key's new messages passed them.
func HoldImportedKeys(ctx context.Context, tx *Tx, entries []*Entry, now time.Time) error {
	return holdParkedKeys(ctx, tx, entries, now, "held")
}

// holdParkedKeys inserts, under the rows' locks, the keys of the parked
// entries that the catalog does not hold, in state ("waiting": allowed
// through is the head; "held": nothing is).
func holdParkedKeys(ctx context.Context, tx *Tx, entries []*Entry, now time.Time, state string) error {
	type parkedKey struct{ queue, key, mode, event string }
	var ks []parkedKey
	var seen map[[2]string]bool // made for the first parked entry: most batches have none
	for _, e := range entries {
		if e.State != StateParked || e.HoldKey == "" {
			continue
		}
		if seen == nil {
			seen = map[[2]string]bool{}
		}
		k := [2]string{e.Queue, e.HoldKey}
		if seen[k] {
			continue // the key's first entry of the batch is its oldest
		}
		seen[k] = true
		mode := headerText(e.Headers[evidence.HeaderHoldMode])
		if mode != "park" && mode != "block" {
			mode = "park" // a copy of an older Lily: wait for an operator, never move on alone
		}
		ks = append(ks, parkedKey{e.Queue, e.HoldKey, mode, e.EventID})
	}
	if len(ks) == 0 {
		return nil
	}
	slices.SortFunc(ks, func(a, b parkedKey) int { return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.key, b.key)) })
	ms := now.UnixMilli()
	if tx.Dialect() == Postgres {
		qs, keys, modes, events := make([]string, len(ks)), make([]string, len(ks)), make([]string, len(ks)), make([]string, len(ks))
		for i, k := range ks {
			qs[i], keys[i], modes[i], events[i] = k.queue, k.key, k.mode, k.event
		}
		// DO UPDATE … WHERE false locks an existing row without writing a
		// new version of it; ORDER BY takes the locks in (queue, key) order.
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_held_keys(queue, msg_key, mode, state, head_event_id, allowed_event_id, since, updated_at)
			SELECT q, k, m, CAST(?6 AS text), ev, CASE WHEN ?6 = 'waiting' THEN ev ELSE '' END, CAST(?5 AS BIGINT), CAST(?5 AS BIGINT)
			FROM unnest(CAST(?1 AS text[]), CAST(?2 AS text[]), CAST(?3 AS text[]), CAST(?4 AS text[])) AS u(q, k, m, ev)
			ORDER BY q, k
			ON CONFLICT (queue, msg_key) DO UPDATE SET updated_at = lily_held_keys.updated_at WHERE false`,
			qs, keys, modes, events, ms, state); err != nil {
			return fmt.Errorf("catalog: hold the keys of %d parked entries (from key %q of %s): %w", len(ks), ks[0].key, ks[0].queue, err)
		}
		return nil
	}
	const chunk = 150 // 6 parameters each, far below SQLite's limit
	for start := 0; start < len(ks); start += chunk {
		part := ks[start:min(start+chunk, len(ks))]
		args := make([]any, 0, 6*len(part))
		for _, k := range part {
			allowed := k.event
			if state != "waiting" {
				allowed = ""
			}
			args = append(args, k.queue, k.key, k.mode, k.event, allowed, ms)
		}
		var b strings.Builder
		for i := range part {
			if i > 0 {
				b.WriteString(", ")
			}
			n := 6 * i
			fmt.Fprintf(&b, "(?%d, ?%d, ?%d, '%s', ?%d, ?%d, ?%d, ?%d)", n+1, n+2, n+3, state, n+4, n+5, n+6, n+6)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_held_keys(queue, msg_key, mode, state, head_event_id, allowed_event_id, since, updated_at)
			VALUES `+b.String()+` ON CONFLICT (queue, msg_key) DO NOTHING`, args...); err != nil {
			return fmt.Errorf("catalog: hold the keys of %d parked entries (from key %q of %s): %w", len(part), part[0].key, part[0].queue, err)
		}
	}
	return nil
}

// headerText is a header's value as text (a string, or bytes as AMQP may
// carry it); "" otherwise.
func headerText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}
