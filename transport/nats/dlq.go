package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// dlqReceipt locates a dead letter in its stream.
type dlqReceipt struct {
	stream string
	seq    uint64
}

// readDeadLetters reads up to limit (0: all) dead letters of queue from
// sequence from on, in stream order, with direct gets.
func (t *Transport) readDeadLetters(ctx context.Context, queue string, from uint64, limit int) ([]*transport.Delivery, error) {
	s, err := t.stream(ctx, DeadLetterStream(queue))
	if err != nil {
		return nil, err
	}
	var out []*transport.Delivery
	subject := DeadLetterSubject(queue)
	for seq := max(from, 1); limit == 0 || len(out) < limit; {
		raw, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("nats: read dead letters of %s from stream %s at %d: %w", queue, DeadLetterStream(queue), seq, err)
		}
		out = append(out, deadLetter(queue, raw))
		seq = raw.Sequence + 1
	}
	return out, nil
}

// deadLetter converts a stored dead letter.
func deadLetter(queue string, raw *jetstream.RawStreamMsg) *transport.Delivery {
	dec := decodeHeaders(raw.Header)
	id := dec.EventID
	if id == "" {
		id = messageID(dec.Headers, DeadLetterStream(queue), raw.Sequence)
	}
	count := 0
	if rec, err := evidence.Decode(dec.Headers); err == nil {
		count = rec.DeliveryCount
	}
	return &transport.Delivery{
		Message:       transport.Message{EventID: id, Key: dec.Key, Type: dec.Type, Body: raw.Data, Headers: dec.Headers},
		Queue:         queue,
		DeliveryCount: count,
		EnqueuedAt:    raw.Time,
		MessageID:     fmt.Sprintf("%s:%d", DeadLetterStream(queue), raw.Sequence),
		Receipt:       &dlqReceipt{stream: DeadLetterStream(queue), seq: raw.Sequence},
	}
}

// PeekDeadLetters returns up to limit (0: all) of queue's dead letters,
// oldest first, without removing them.
func (t *Transport) PeekDeadLetters(ctx context.Context, queue string, limit int) ([]*transport.Delivery, error) {
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	return t.readDeadLetters(ctx, queue, 1, limit)
}

// DrainDeadLetters hands queue's dead letters to store in batches and
// removes a batch from the dead-letter stream only after store returned
// nil for it (catalog commit, then removal).
func (t *Transport) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	s, err := t.stream(ctx, DeadLetterStream(p.Queue))
	if err != nil {
		return 0, err
	}
	return drainStream(ctx, s, DeadLetterSubject(p.Queue), p, func(ctx context.Context, from uint64, want int) ([]held, error) {
		ds, err := t.readDeadLetters(ctx, p.Queue, from, want)
		hs := make([]held, len(ds))
		for i, d := range ds {
			hs[i] = held{seq: d.Receipt.(*dlqReceipt).seq, d: d}
		}
		return hs, err
	}, store)
}

// DeadLetterDepth counts queue's dead letters not drained yet.
func (t *Transport) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	s, err := t.stream(ctx, DeadLetterStream(queue))
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("nats: dead-letter stream %s of %s: %w", DeadLetterStream(queue), queue, err)
	}
	return int64(info.State.Msgs), nil
}

// InFlight counts queue's messages that its consumer has not acknowledged
// or terminated: pending (never delivered) and delivered-unacknowledged
// (leased, or waiting out a retry delay).
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	p, err := t.InFlightParts(ctx, queue)
	return p.Total(), err
}

// InFlightParts splits InFlight: Ready is the consumer's NumPending,
// Unacked its NumAckPending (a message NAKed with a delay stays in it).
func (t *Transport) InFlightParts(ctx context.Context, queue string) (transport.InFlightParts, error) {
	c, b, err := t.consumer(ctx, queue)
	if err != nil {
		return transport.InFlightParts{}, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.forget(queue)
		return transport.InFlightParts{}, fmt.Errorf("nats: consumer %s of stream %s (queue %s): %w", b.Consumer, b.Stream, queue, err)
	}
	return transport.InFlightParts{Ready: int64(info.NumPending), Unacked: int64(info.NumAckPending)}, nil
}
