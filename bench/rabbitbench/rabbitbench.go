// Package rabbitbench measures Lily's RabbitMQ transport against plain
// amqp091-go loops on the same broker, in one run (docs/design.md §12):
//
//   - happy path: a Lily consumer acking every message, against a plain
//     consume/ack loop with the same prefetch (target ≥ 0.9×);
//   - hand-off: a Lily consumer dead-lettering every message (copy published
//     with mandatory, confirmed, then the original acked), against plain
//     publish-with-confirms of the same messages (target ≥ 0.8×), and for
//     context a hand-written consume → publish-with-confirm → ack forwarder,
//     once copying the message as it is and once writing on the copy the
//     same evidence headers as Lily (so that the copies are the same size);
//   - competing consumers: 4 Lily consumers, and 4 plain consume/ack
//     loops, on one queue, counting the event IDs handled more than once
//     (must be 0) and the messages handled (must equal those published).
//
// Every run declares fresh quorum queues with Lily's topology, preloads N
// messages, measures the time until all N are settled, checks that all N
// arrived where they should, and deletes its queues.
package rabbitbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// Config is one run's parameters; zero fields take the defaults.
type Config struct {
	// URL of the broker. Defaults to rabbitmq.DefaultURL.
	URL string
	// N messages per run. Defaults to 20000.
	N int
	// BodySize in bytes. Defaults to 512.
	BodySize int
	// Prefetch of both consumers. Defaults to 256.
	Prefetch int
	// Concurrency of the Lily consumer's handlers. Defaults to 4.
	Concurrency int
	// ConfirmWindow is how many publishes the plain publisher keeps
	// unconfirmed. Defaults to 256.
	ConfirmWindow int
	// Consumers is the number of competing consumers of the *Competing
	// runs, on one queue. Defaults to 4.
	Consumers int
	// Publishers is the Lily transport's number of confirm-mode publisher
	// channels (rabbitmq.Options.Publishers). Defaults to the transport's
	// default.
	Publishers int
}

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = rabbitmq.DefaultURL
	}
	if c.N <= 0 {
		c.N = 20000
	}
	if c.BodySize <= 0 {
		c.BodySize = 512
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 256
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Consumers <= 0 {
		c.Consumers = 4
	}
	if c.ConfirmWindow <= 0 {
		c.ConfirmWindow = 256
	}
	return c
}

// Result is one measurement.
type Result struct {
	Name     string
	N        int
	Duration time.Duration
	// ClientCPU is this process's CPU time during the run; BrokerCPU the
	// broker's (0 when it could not be read), other clients included.
	ClientCPU, BrokerCPU time.Duration
	// Allocs counts this process's heap allocations during the run.
	Allocs uint64
	// Competition is set by the competing-consumer runs: what each
	// consumer handled, and the duplicates.
	Competition *Competition
}

// CPUPerMessage returns the client's and the broker's CPU µs per message.
func (r Result) CPUPerMessage() (client, broker float64) {
	return float64(r.ClientCPU.Microseconds()) / float64(r.N), float64(r.BrokerCPU.Microseconds()) / float64(r.N)
}

// PerSecond is the throughput.
func (r Result) PerSecond() float64 { return float64(r.N) / r.Duration.Seconds() }

// setup declares a fresh queue with Lily's topology and preloads N
// messages; cleanup deletes it.
type setup struct {
	tr   *rabbitmq.Transport
	qc   lily.QueueConfig
	conn *amqp.Connection
}

func newSetup(ctx context.Context, cfg Config, name string) (*setup, error) {
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: cfg.URL, Publishers: cfg.Publishers, Logger: quiet})
	if err != nil {
		return nil, err
	}
	qc := lily.QueueConfig{Name: fmt.Sprintf("bench%08x.%s", rand.Uint32(), name), Transport: lily.TransportRabbitMQ, DeliveryLimit: new(20)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		tr.Close()
		return nil, err
	}
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		tr.Close()
		return nil, err
	}
	s := &setup{tr: tr, qc: qc, conn: conn}
	msgs := make([]lily.Message, 0, 1000)
	body := make([]byte, cfg.BodySize)
	for i := 0; i < cfg.N; i++ {
		msgs = append(msgs, lily.Message{Body: body})
		if len(msgs) == cap(msgs) || i == cfg.N-1 {
			if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
				s.close(ctx)
				return nil, err
			}
			msgs = msgs[:0]
		}
	}
	return s, nil
}

func (s *setup) close(ctx context.Context) {
	s.tr.DeleteQueues(ctx, s.qc.Spec())
	s.conn.Close()
	s.tr.Close()
}

// channel opens a channel on the setup's connection, in confirm mode if
// confirm, with prefetch if it is positive.
func (s *setup) channel(confirm bool, prefetch int) (*amqp.Channel, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	if confirm {
		err = ch.Confirm(false)
	}
	if err == nil && prefetch > 0 {
		err = ch.Qos(prefetch, 0, false)
	}
	if err != nil {
		ch.Close()
		return nil, err
	}
	return ch, nil
}

// waitConfirm waits for the broker's confirm of one publish.
func waitConfirm(ctx context.Context, dc *amqp.DeferredConfirmation) error {
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("confirm: ok=%v err=%v", ok, err)
	}
	return nil
}

// depth returns the ready messages of a queue.
func (s *setup) depth(queue string) (int, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Messages, err
}

// LilyAck consumes N messages with a Lily consumer whose handler succeeds.
func LilyAck(ctx context.Context, cfg Config) (Result, error) {
	return runLily(ctx, cfg.withDefaults(), "lily-ack", nil)
}

// LilyDeadLetter consumes N messages with a Lily consumer whose handler
// fails permanently: every message is handed off to the DLQ.
func LilyDeadLetter(ctx context.Context, cfg Config) (Result, error) {
	return runLily(ctx, cfg.withDefaults(), "lily-deadletter", lily.Permanent(errors.New("bench: permanent")))
}

func runLily(ctx context.Context, cfg Config, name string, fail error) (Result, error) {
	s, err := newSetup(ctx, cfg, name)
	if err != nil {
		return Result{}, err
	}
	defer s.close(ctx)
	var settled atomic.Int64
	done := make(chan struct{})
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventAcked || e.Kind == lily.EventDeadLettered {
			if settled.Add(1) == int64(cfg.N) {
				close(done)
			}
		}
	})
	c, err := lily.NewConsumer(s.tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error { return fail }),
		lily.ConsumerOptions{Queue: s.qc, Concurrency: cfg.Concurrency, Prefetch: cfg.Prefetch, Hooks: []lily.Hook{hook},
			ReceiveWait: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		return Result{}, err
	}
	res, runErr, err := timeConsumers(ctx, name, cfg.N, done, c)
	if err != nil {
		return Result{}, err
	}
	if runErr != nil {
		return Result{}, runErr
	}
	// Conservation: the queue is empty; the DLQ holds exactly the failures.
	wantDLQ := 0
	if fail != nil {
		wantDLQ = cfg.N
	}
	if err := s.check(0, wantDLQ); err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// quiet is the logger of the runs' consumers: nobody reads it.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// timeConsumers runs consumers until done is closed and times that as the
// run of n messages; once the clock has stopped it lets the broker settle
// the last acknowledgements (quiesce) and stops the consumers. runErr is
// what their Run returned, joined; err is the context's error when it
// ended before done was closed.
func timeConsumers(ctx context.Context, name string, n int, done <-chan struct{}, consumers ...*lily.Consumer) (res Result, runErr, err error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(consumers))
	start := startClock()
	for _, c := range consumers {
		go func() { errc <- c.Run(runCtx) }()
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, nil, ctx.Err()
	}
	res = start.stop(name, n)
	quiesce()
	cancel()
	for range consumers {
		runErr = errors.Join(runErr, <-errc)
	}
	return res, runErr, nil
}

// check verifies conservation after a run. A quorum queue's message count
// (queue.declare-ok) reflects the Raft state the queue has applied so far,
// which can trail acknowledgements and publishes just sent, so the counts are
// read again for up to checkWait before a difference counts as a failure.
func (s *setup) check(wantQueue, wantDLQ int) error {
	deadline := time.Now().Add(checkWait)
	for {
		n, err := s.depth(s.qc.Name)
		if err != nil {
			return err
		}
		d, err := s.depth(rabbitmq.DeadLetterQueue(s.qc.Name))
		if err != nil {
			return err
		}
		if n == wantQueue && d == wantDLQ {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("conservation: %d left in the queue (want %d), %d in the DLQ (want %d)", n, wantQueue, d, wantDLQ)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// quiesce waits, after a run's clock stopped, before its consuming channel
// is closed. RabbitMQ 3.10's quorum-queue client in the channel process can
// still hold the last acknowledgements (batched while earlier commands are
// pending); closing the channel at once drops them, and those messages come
// back to the queue as duplicates, which the conservation check would count
// (seen: 48 of 20,000 after a plain consume/ack loop, 0 before the close).
func quiesce() { time.Sleep(500 * time.Millisecond) }

// checkWait bounds how long check waits for the queue counts to settle.
const checkWait = 10 * time.Second
