package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// The catalog as the last resort for a dead letter the broker refuses
// (docs/design.md §8.3, §9.6). When the broker refuses a dead-letter
// copy for good — its dead-letter queue is full and rejects publishes, or
// the copy is larger than the broker takes — holding the original and
// publishing again stalls every healthy message behind it (a small
// prefetch), and releasing it runs the handler again and ends, at the
// delivery limit, as a broker-made dead letter with Lily's evidence lost.
// The catalog is a durable store Lily already writes, so Accounted asks
// the transport to fail such a copy at once (SettleParams.FailRefused),
// writes the dead letter into the catalog itself — committed, with the
// original body and the full evidence, x-lily-dlq-refused saying why — and
// only then acknowledges the original (not counted as acked: the entry
// counts it as dead-lettered). Nothing is held, nothing stalls, nothing
// is lost; the log, SettleParams.OnStored (the runtime's event, the
// metric) and the catalog's RefusedHeld (/healthz) say an operator must
// act.

// settleRefusable settles ss through the wrapped transport with
// FailRefused and stores the dead letters it refused in the catalog
// before acknowledging their originals.
func (a *Accounted) settleRefusable(ctx context.Context, ss []transport.Settlement, onStored func(int, string)) error {
	err := a.Transport.Settle(ctx, &transport.SettleParams{Settlements: ss, FailRefused: true})
	if err == nil {
		return nil
	}
	errs := transport.SettleErrors(err, len(ss))
	var idx []int
	var entries []*catalog.Entry
	var whys []string
	now := a.o.Now()
	for i, e := range errs {
		s := ss[i]
		if e == nil || s.Action != transport.DeadLetter || !errors.Is(e, transport.ErrDeadLetterRefused) {
			continue
		}
		why := fmt.Sprintf("stored in the catalog only, at %s: %v",
			now.UTC().Format(time.RFC3339Nano), e)
		h := maps.Clone(s.Headers)
		if h == nil {
			h = transport.Headers{}
		}
		h[evidence.HeaderDLQRefused] = why
		ent := catalog.NewEntry(s.Delivery.Queue, s.Delivery.Message, h, s.Reason, now)
		ent.DLKey = refusedKey(ent)
		idx, entries, whys = append(idx, i), append(entries, ent), append(whys, why)
	}
	if len(entries) == 0 {
		return err
	}
	if ierr := a.ledger.store.Insert(ctx, entries...); ierr != nil {
		// The originals stay unacknowledged; the runtime reports and
		// releases them, as for any failed hand-off.
		for _, i := range idx {
			errs[i] = fmt.Errorf("%w; storing the dead letter in the catalog instead failed too: %w", errs[i], ierr)
		}
		return &transport.SettleError{Errs: errs}
	}
	acks := make([]transport.Settlement, len(idx))
	for j, i := range idx {
		acks[j] = transport.Settlement{Delivery: ss[i].Delivery, Action: transport.Ack}
	}
	ackErrs := transport.SettleErrors(a.Transport.Settle(ctx, &transport.SettleParams{Settlements: acks}), len(acks))
	failed := 0
	for j, i := range idx {
		errs[i] = ackErrs[j]
		if ackErrs[j] != nil {
			// The entry is committed; the redelivered original is stored
			// again under the same dl_key, i.e. not twice.
			errs[i] = fmt.Errorf("ledger: dead letter %s stored in the catalog (the broker refused its copy), but acknowledging the original failed: %w", ss[i].Delivery.EventID, ackErrs[j])
			continue
		}
		if onStored != nil {
			onStored(i, whys[j]) // the runtime logs it with its consumer and reports the event
			continue
		}
		a.o.Log.Error("the broker refused the dead-letter copy; the dead letter is stored in the catalog only: an operator must drain or enlarge the dead-letter queue",
			"queue", ss[i].Delivery.Queue, "event_id", ss[i].Delivery.EventID, "reason", ss[i].Reason, "entry", entries[j].ID, "why", whys[j])
	}
	for _, e := range errs {
		if e != nil {
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	return &transport.SettleError{Errs: errs}
}

// refusedKey identifies the storing of one refused dead letter (Entry.DLKey,
// with evidence.DLKeyRefusedPrefix): an original whose ack failed after its
// entry was committed is stored once when it is refused again.
func refusedKey(e *catalog.Entry) string {
	h := sha256.New()
	for _, f := range []string{"refused", e.Queue, e.EventID, e.BodySHA256, e.Source, e.SourceCoords, strconv.Itoa(e.RedriveCount), e.Reason} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return evidence.DLKeyRefusedPrefix + hex.EncodeToString(h.Sum(nil))
}
