package rabbitbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/bench/internal/idcount"
)

// Competition is what a competing-consumer run saw: messages published,
// handler calls (or plain deliveries) and event IDs handled more than once.
type Competition struct {
	Consumers           int
	Published           int
	Handled, Duplicates int64
}

// competition returns what k counted for a run of n messages by consumers.
func competition(k *idcount.Counter, consumers, n int) *Competition {
	return &Competition{Consumers: consumers, Published: n, Handled: k.Calls(), Duplicates: k.Duplicates()}
}

// check fails unless every published message was handled exactly once.
func (c *Competition) check() error {
	if c.Duplicates != 0 || c.Handled != int64(c.Published) {
		return fmt.Errorf("conservation: %d handled for %d published, %d event IDs handled more than once (want %d and 0)", c.Handled, c.Published, c.Duplicates, c.Published)
	}
	return nil
}

// LilyAckCompeting consumes N messages with Consumers competing Lily
// consumers (separate lily.NewConsumer instances, each Concurrency
// handlers and Prefetch, on one rabbitmq.Transport — one connection — and
// one queue); the handler succeeds and counts event IDs.
func LilyAckCompeting(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	const name = "lily-ack-competing"
	s, err := newSetup(ctx, cfg, name)
	if err != nil {
		return Result{}, err
	}
	defer s.close(ctx)
	ids := idcount.New(cfg.N)
	var settled, other atomic.Int64
	done := make(chan struct{})
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind != lily.EventAcked {
			other.Add(1)
			return
		}
		if settled.Add(1) == int64(cfg.N) {
			close(done)
		}
	})
	handler := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		ids.Handled(d.EventID)
		return nil
	})
	consumers := make([]*lily.Consumer, cfg.Consumers)
	for i := range consumers {
		c, err := lily.NewConsumer(s.tr, handler, lily.ConsumerOptions{Queue: s.qc, Concurrency: cfg.Concurrency, Prefetch: cfg.Prefetch,
			Hooks: []lily.Hook{hook}, ReceiveWait: 50 * time.Millisecond, Name: fmt.Sprintf("rabbitbench-%d", i+1),
			Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		consumers[i] = c
	}
	res, runErr, err := timeConsumers(ctx, name, cfg.N, done, consumers...)
	if err != nil {
		return Result{}, err
	}
	res.Competition = competition(ids, cfg.Consumers, cfg.N)
	if n := other.Load(); n != 0 {
		runErr = errors.Join(runErr, fmt.Errorf("conservation: %d events other than acked", n))
	}
	if err := errors.Join(runErr, res.Competition.check(), s.check(0, 0)); err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// PlainAckCompeting consumes N messages with Consumers plain amqp091-go
// consume/ack loops (one channel and one goroutine each, the same
// prefetch, an individual ack per message) on one connection and one
// queue, counting message IDs (Lily's event IDs).
func PlainAckCompeting(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	const name = "plain-ack-competing"
	s, err := newSetup(ctx, cfg, name)
	if err != nil {
		return Result{}, err
	}
	defer s.close(ctx)
	chs := make([]*amqp.Channel, cfg.Consumers)
	for i := range chs {
		if chs[i], err = s.channel(false, cfg.Prefetch); err != nil {
			return Result{}, err
		}
		defer chs[i].Close()
	}
	ids := idcount.New(cfg.N)
	var acked atomic.Int64
	done := make(chan struct{})
	stop := make(chan struct{})
	errc := make(chan error, cfg.Consumers)
	var wg sync.WaitGroup
	start := startClock()
	for _, ch := range chs {
		ds, err := ch.Consume(s.qc.Name, "", false, false, false, false, nil)
		if err != nil {
			close(stop)
			wg.Wait()
			return Result{}, err
		}
		wg.Go(func() {
			for {
				select {
				case d, ok := <-ds:
					if !ok {
						return
					}
					ids.Handled(d.MessageId)
					if err := d.Ack(false); err != nil {
						errc <- err
						return
					}
					if acked.Add(1) == int64(cfg.N) {
						close(done)
					}
				case <-stop:
					return
				}
			}
		})
	}
	var runErr error
	select {
	case <-done:
	case runErr = <-errc:
	case <-ctx.Done():
		runErr = ctx.Err()
	}
	res := start.stop(name, cfg.N)
	quiesce()
	close(stop)
	wg.Wait()
	for _, ch := range chs {
		ch.Close()
	}
	if runErr != nil {
		return Result{}, fmt.Errorf("%s: %w", name, runErr)
	}
	res.Competition = competition(ids, cfg.Consumers, cfg.N)
	if err := errors.Join(res.Competition.check(), s.check(0, 0)); err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}
