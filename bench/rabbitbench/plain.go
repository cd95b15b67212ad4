package rabbitbench

import (
	"context"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// PlainAck consumes N messages with a plain amqp091-go loop: basic.consume
// with the same prefetch, one goroutine, an individual ack per message.
func PlainAck(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	s, err := newSetup(ctx, cfg, "plain-ack")
	if err != nil {
		return Result{}, err
	}
	defer s.close(ctx)
	ch, err := s.channel(false, cfg.Prefetch)
	if err != nil {
		return Result{}, err
	}
	defer ch.Close()
	start := startClock()
	ds, err := ch.Consume(s.qc.Name, "", false, false, false, false, nil)
	if err != nil {
		return Result{}, err
	}
	for i := 0; i < cfg.N; i++ {
		select {
		case d := <-ds:
			if err := d.Ack(false); err != nil {
				return Result{}, err
			}
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	res := start.stop("plain-ack", cfg.N)
	quiesce()
	ch.Close()
	if err := s.check(0, 0); err != nil {
		return Result{}, fmt.Errorf("plain-ack: %w", err)
	}
	return res, nil
}

// PlainPublishConfirm publishes N messages (of the same size, with
// mandatory, to the DLQ through the dead-letter exchange, as Lily's hand-off
// does) with publisher confirms, keeping ConfirmWindow unconfirmed.
func PlainPublishConfirm(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	small := cfg
	small.N = 1 // the queue needs no preload
	s, err := newSetup(ctx, small, "plain-publish")
	if err != nil {
		return Result{}, err
	}
	defer s.close(ctx)
	ch, err := s.channel(true, 0)
	if err != nil {
		return Result{}, err
	}
	defer ch.Close()
	body := make([]byte, cfg.BodySize)
	pending := make([]*amqp.DeferredConfirmation, 0, cfg.ConfirmWindow)
	wait := func() error {
		for _, dc := range pending {
			if err := waitConfirm(ctx, dc); err != nil {
				return fmt.Errorf("plain publish: %w", err)
			}
		}
		pending = pending[:0]
		return nil
	}
	start := startClock()
	for i := 0; i < cfg.N; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, rabbitmq.DeadLetterExchange(s.qc.Exchange), s.qc.Name, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body, MessageId: fmt.Sprint(i)})
		if err != nil {
			return Result{}, err
		}
		pending = append(pending, dc)
		if len(pending) == cap(pending) {
			if err := wait(); err != nil {
				return Result{}, err
			}
		}
	}
	if err := wait(); err != nil {
		return Result{}, err
	}
	res := start.stop("plain-publish-confirm", cfg.N)
	if err := s.check(1, cfg.N); err != nil {
		return Result{}, fmt.Errorf("plain-publish-confirm: %w", err)
	}
	return res, nil
}

// PlainForwarder is a hand-written dead-letter forwarder: consume with the
// same prefetch, publish each message to the DLQ with mandatory and a
// confirm, ack the original once its confirm arrived (pipelined over the
// prefetch window). For context next to Lily's hand-off.
func PlainForwarder(ctx context.Context, cfg Config) (Result, error) {
	return forward(ctx, cfg, "plain-forward", false)
}

// PlainForwarderEvidence is PlainForwarder writing on each copy the same
// evidence headers as Lily's dead-letter hand-off (evidence.Record.Apply
// with the fields Lily fills for a permanent failure), so that the copies
// are the same size: it separates the cost of the evidence from the cost
// of Lily's runtime.
func PlainForwarderEvidence(ctx context.Context, cfg Config) (Result, error) {
	return forward(ctx, cfg, "plain-forward-evidence", true)
}

func forward(ctx context.Context, cfg Config, name string, withEvidence bool) (Result, error) {
	cfg = cfg.withDefaults()
	host, _ := os.Hostname()
	s, err := newSetup(ctx, cfg, name)
	if err != nil {
		return Result{}, err
	}
	defer s.close(ctx)
	cch, err := s.channel(false, cfg.Prefetch)
	if err != nil {
		return Result{}, err
	}
	defer cch.Close()
	pch, err := s.channel(true, 0)
	if err != nil {
		return Result{}, err
	}
	defer pch.Close()
	start := startClock()
	ds, err := cch.Consume(s.qc.Name, "", false, false, false, false, nil)
	if err != nil {
		return Result{}, err
	}
	type inflight struct {
		d  amqp.Delivery
		dc *amqp.DeferredConfirmation
	}
	window := make([]inflight, 0, cfg.Prefetch)
	flush := func() error {
		for _, f := range window {
			if err := waitConfirm(ctx, f.dc); err != nil {
				return fmt.Errorf("forwarder: %w", err)
			}
			if err := f.d.Ack(false); err != nil {
				return err
			}
		}
		window = window[:0]
		return nil
	}
	for i := 0; i < cfg.N; i++ {
		var d amqp.Delivery
		select {
		case d = <-ds:
		case <-time.After(20 * time.Millisecond):
			if err := flush(); err != nil { // the window may hold all prefetched
				return Result{}, err
			}
			i--
			continue
		}
		h := d.Headers
		if withEvidence {
			h = make(amqp.Table, len(d.Headers)+16)
			for k, v := range d.Headers {
				h[k] = v
			}
			now := time.Now()
			evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "bench: permanent",
				Source: "rabbitmq/" + s.qc.Name, SourceMessageID: d.MessageId, DeliveryCount: 1,
				FirstFailureAt: now, LastFailureAt: now, DeadLetteredAt: now, Consumer: os.Args[0], Host: host}.Apply(h)
		}
		dc, err := pch.PublishWithDeferredConfirmWithContext(ctx, rabbitmq.DeadLetterExchange(s.qc.Exchange), s.qc.Name, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Headers: h, MessageId: d.MessageId, Body: d.Body})
		if err != nil {
			return Result{}, err
		}
		window = append(window, inflight{d, dc})
		if len(window) >= cfg.Prefetch/2 {
			if err := flush(); err != nil {
				return Result{}, err
			}
		}
	}
	if err := flush(); err != nil {
		return Result{}, err
	}
	res := start.stop(name, cfg.N)
	quiesce()
	cch.Close()
	if err := s.check(0, cfg.N); err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}
