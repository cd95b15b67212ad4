package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport"
)

// held is one message of a stream that holds dead letters (a queue's
// dead-letter stream) or pointers to them (a foreign consumer's advisory
// stream), and the dead letter it gives.
type held struct {
	seq uint64
	d   *transport.Delivery
}

// drainStream is the drain loop of such a stream s, whose messages are on
// subject: read reads up to want of them from sequence from on, in stream
// order; each batch goes to store, and only after store returned nil is it
// removed, with one purge of the subject below the batch's last sequence
// (everything below was drained before, or is this batch: the messages
// come in stream order, and new ones only arrive behind them) instead of a
// request per message. A crash between the store and the purge drains the
// batch again, into the same catalog entries.
func drainStream(ctx context.Context, s jetstream.Stream, subject string, p *transport.DrainParams,
	read func(ctx context.Context, from uint64, want int) ([]held, error), store func(context.Context, []*transport.Delivery) error) (int, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 256
	}
	name := s.CachedInfo().Config.Name
	n := 0
	from := uint64(1)
	for p.Limit == 0 || n < p.Limit {
		want := batch
		if p.Limit > 0 {
			want = min(want, p.Limit-n)
		}
		hs, err := read(ctx, from, want)
		if err != nil {
			return n, err
		}
		if len(hs) == 0 {
			return n, nil
		}
		ds := make([]*transport.Delivery, len(hs))
		for i, h := range hs {
			ds[i] = h.d
		}
		if err := store(ctx, ds); err != nil {
			return n, fmt.Errorf("nats: store the dead letters of %s: %w (kept in stream %s)", p.Queue, err, name)
		}
		last := hs[len(hs)-1].seq
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(last+1)); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, fmt.Errorf("nats: remove %d drained message(s), sequences %d..%d, from stream %s: %w (stored; they would be drained again, into the same entries)",
				len(hs), hs[0].seq, last, name, err)
		}
		from = last + 1
		n += len(hs)
	}
	return n, nil
}
