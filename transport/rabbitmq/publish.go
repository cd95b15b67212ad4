package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

// Hand-off failures: the copy was not confirmed, so the original stays.
var (
	// ErrNacked: the broker refused the publish (e.g. the target queue is
	// full and rejects publishes).
	ErrNacked = errors.New("rabbitmq: publish nacked by the broker (target full or failing)")
	// ErrUnroutable: no queue is bound for the routing key; the broker
	// returned the message.
	ErrUnroutable = fmt.Errorf("rabbitmq: publish returned as unroutable: %w", transport.ErrUnknownQueue)
	// ErrConfirmTimeout: no confirm arrived in time; the outcome is
	// unknown, so the hand-off counts as failed.
	ErrConfirmTimeout = errors.New("rabbitmq: no publish confirm in time")
)

// publisher is a confirm-mode channel with its returns, used by one batch
// at a time so that every return it sees belongs to that batch.
type publisher struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// outMsg is one message to publish.
type outMsg struct {
	exchange, key string
	pub           amqp.Publishing
}

func (t *Transport) acquire(ctx context.Context) (*publisher, error) {
	t.mu.Lock()
	if t.pubs == nil {
		t.pubs = make(chan *publisher, t.opts.Publishers)
		for range t.opts.Publishers {
			t.pubs <- nil
		}
	}
	pool := t.pubs
	t.mu.Unlock()
	var p *publisher
	select {
	case p = <-pool:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p != nil && !p.ch.IsClosed() {
		return p, nil
	}
	ch, _, err := t.channel(ctx)
	if err != nil {
		pool <- nil
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		pool <- nil
		return nil, fmt.Errorf("rabbitmq: confirm mode: %w", err)
	}
	p = &publisher{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 8192))}
	return p, nil
}

func (t *Transport) release(p *publisher, broken bool) {
	t.mu.Lock()
	pool := t.pubs
	t.mu.Unlock()
	if broken {
		p.ch.Close()
		p = nil
	}
	pool <- p
}

// maxBatch bounds one publish batch below the returns buffer, so that the
// connection's reader never blocks on it.
const maxBatch = 4096

// publish sends msgs with mandatory set and waits for every confirm. It
// returns one error per message: nil only for a message the broker
// confirmed and did not return.
func (t *Transport) publish(ctx context.Context, msgs []outMsg) []error {
	errs := make([]error, len(msgs))
	for start := 0; start < len(msgs); start += maxBatch {
		end := min(start+maxBatch, len(msgs))
		copy(errs[start:end], t.publishBatch(ctx, msgs[start:end]))
	}
	return errs
}

func (t *Transport) publishBatch(ctx context.Context, msgs []outMsg) []error {
	errs := make([]error, len(msgs))
	p, err := t.acquire(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	broken := false
	confs := make([]*amqp.DeferredConfirmation, len(msgs))
	frameMax := t.frameMax()
	for i, m := range msgs {
		// A header frame over frame_max would make the broker close the
		// whole connection: that message fails alone, unsent.
		size := headerFrameSize(&m.pub)
		if frameMax > 0 && size > frameMax {
			if lean, ok := transport.DropHint(m.pub.Headers); ok { // the mark alone never refuses a message
				m.pub.Headers = lean
				size = headerFrameSize(&m.pub)
			}
		}
		if frameMax > 0 && size > frameMax {
			errs[i] = fmt.Errorf("%w: publish to %q/%q: the header frame takes %d bytes, the connection's frame_max is %d; "+
				"send smaller headers or raise frame_max on the broker and client", ErrFrameTooLarge, m.exchange, m.key, size, frameMax)
			continue
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, m.exchange, m.key, true, false, m.pub)
		if err != nil {
			errs[i] = fmt.Errorf("rabbitmq: publish to %q/%q: %w", m.exchange, m.key, err)
			broken = true
			continue
		}
		confs[i] = dc
	}
	wctx, cancel := context.WithTimeout(ctx, t.opts.ConfirmTimeout)
	defer cancel()
	for i, dc := range confs {
		if dc == nil {
			continue
		}
		ok, err := dc.WaitContext(wctx)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("%w: %v", ErrConfirmTimeout, err)
			broken = true // late confirms must not reach the next batch
		case !ok:
			errs[i] = fmt.Errorf("%w: %q/%q", ErrNacked, msgs[i].exchange, msgs[i].key)
		}
	}
	// The broker sends basic.return before the confirm of the same
	// message, and the client queues it before processing that confirm:
	// every return of this batch is buffered by now.
	returned := map[[3]string]bool{}
drain:
	for {
		select {
		case r, ok := <-p.returns:
			if !ok { // channel closed: no more returns
				break drain
			}
			returned[[3]string{r.Exchange, r.RoutingKey, r.MessageId}] = true
		default:
			break drain
		}
	}
	if len(returned) > 0 {
		for i, m := range msgs {
			if errs[i] == nil && returned[[3]string{m.exchange, m.key, m.pub.MessageId}] {
				errs[i] = fmt.Errorf("%w: exchange %q routing key %q", ErrUnroutable, m.exchange, m.key)
			}
		}
	}
	t.release(p, broken || p.ch.IsClosed())
	return errs
}

// Publish enqueues messages to exactly one queue — through the default
// exchange, whose routing key is the queue name, never a shared exchange —
// and waits for the confirms. A queue that does not exist returns the
// message: ErrUnroutable, which wraps transport.ErrUnknownQueue.
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	if len(p.Messages) == 0 {
		return nil
	}
	msgs := make([]outMsg, len(p.Messages))
	for i, m := range p.Messages {
		if m.EventID == "" {
			return fmt.Errorf("rabbitmq: publish to %s: message %d has no event ID", p.Queue, i)
		}
		pub, err := publishing(m, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: publish to %s: message %s: %w", p.Queue, m.EventID, err)
		}
		msgs[i] = outMsg{exchange: "", key: p.Queue, pub: pub}
	}
	if err := errors.Join(t.publish(ctx, msgs)...); err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: %w", p.Queue, err)
	}
	return nil
}
