package outbox_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
)

// partial refuses the first message of the first publish of two or more
// and takes the rest, as a full reject-publish queue that made room
// mid-batch can; every later publish goes through.
type partial struct {
	transport.Transport
	used atomic.Bool
}

func (p *partial) Publish(ctx context.Context, pp *transport.PublishParams) error {
	if len(pp.Messages) < 2 || p.used.Swap(true) {
		return p.Transport.Publish(ctx, pp)
	}
	rest := *pp
	rest.Messages = pp.Messages[1:]
	if err := p.Transport.Publish(ctx, &rest); err != nil {
		return err
	}
	return errors.New("injected: the queue refused the batch's first message and took the rest")
}

// TestRelayPartialRefusalReordersKey pins the accepted limit spin found in
// the relay (docs/design.md §14.4, models/outbox.pml "limit: ANY_SUBSET
// order"): when the broker refuses a key's first row of a first-attempt
// batch and takes the second, the second reaches the queue first; the
// relay then publishes the first, and the second again (a duplicate an
// inbox absorbs). Nothing is lost or invented. If this test fails because
// the order holds, the limit is closed: update §14.4, docs/inbox.md and the
// model's limit line.
func TestRelayPartialRefusalReordersKey(t *testing.T) {
	eachApp(t, func(t *testing.T, a app) {
		const q = "orders.partial"
		tr := &partial{Transport: target(t, q)}
		ms := []outbox.Message{
			{Queue: q, Message: lily.Message{Key: "k", Body: []byte("first"), Headers: lily.Headers{"seq": int32(1)}}},
			{Queue: q, Message: lily.Message{Key: "k", Body: []byte("second"), Headers: lily.Headers{"seq": int32(2)}}},
		}
		a.add(t, true, ms...)
		// Each look at the clock is an hour later: a failed row's backoff
		// has run out by the next round, without waiting.
		var hours atomic.Int64
		now := func() time.Time { return time.Now().Add(time.Duration(hours.Add(1)) * time.Hour) }
		r, err := outbox.NewRelay(a.db, tr, outbox.RelayOptions{Logger: quiet, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		effecttest.RelayAll(t, r)
		got := drain(t, tr.Transport, q)
		var seqs []int32
		count := map[string]int{}
		for _, d := range got {
			seqs = append(seqs, d.Headers["seq"].(int32))
			count[d.EventID]++
		}
		first, second := ms[0].EventID, ms[1].EventID
		// Conservation: each row reached the queue, the refused one once,
		// the taken one twice (its batch failed as a whole); no other ID.
		if count[first] != 1 || count[second] != 2 || len(count) != 2 {
			t.Fatalf("deliveries per event ID %v, want %s once and %s twice (seqs %v)", count, first, second, seqs)
		}
		if want := []int32{2, 1, 2}; !slices.Equal(seqs, want) {
			t.Fatalf("seqs in the queue %v, want %v: the key's second row first, as spin's counterexample has it", seqs, want)
		}
	})
}
