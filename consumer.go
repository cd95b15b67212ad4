package lily

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/retry"
	"github.com/lily-mq/lily/transport"
)

// ConsumerOptions configure a Consumer. The zero value of every field but
// Queue means its default.
type ConsumerOptions struct {
	// Queue is the queue to consume and its retry and dead-letter settings.
	Queue QueueConfig
	// Concurrency is the number of handlers running at once. Defaults to 4.
	Concurrency int
	// Prefetch is the most deliveries held (received, not yet settled) at
	// once. Defaults to 256.
	Prefetch int
	// Instance identifies this consumer instance to the transport (its
	// leases). Defaults to "<host>-<pid>-<random>".
	Instance string
	// Name and Version identify the consuming code in the evidence
	// (x-lily-consumer, x-lily-consumer-version). Name defaults to the
	// program name; Version to "".
	Name    string
	Version string
	// Classifier decides permanent versus transient. Defaults to a
	// DefaultClassifier with the default permanent allow-list, less the
	// queue's retry_errors, plus its permanent_errors (QueueConfig.Classifier).
	Classifier Classifier
	// Redactor masks secrets in error messages and stacks. Defaults to the
	// built-in patterns.
	Redactor *evidence.Redactor
	// Logger receives the consumer's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe every outcome. Defaults to none.
	Hooks []Hook
	// ReceiveWait is how long one Receive call waits for messages.
	// Defaults to 1s.
	ReceiveWait time.Duration
	// SettleBatch is the most settlements committed together (group
	// commit). Defaults to 512.
	SettleBatch int
	// AbandonGrace is how long a handler may run past its timeout (after
	// its context was cancelled) before its delivery is released and the
	// handler abandoned. Defaults to 1s.
	AbandonGrace time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Keys keeps the held keys of a queue whose ordering is "park" or
	// "block" (the catalog, *catalog.Store). Required for those orderings;
	// unused for "reorder".
	Keys KeyStore
	// KeyPoll is how often held keys are looked after: a blocked key whose
	// head was discarded moves on, an allowed entry not yet sent (after a
	// crash) is sent. Defaults to 1s.
	KeyPoll time.Duration
}

func (o ConsumerOptions) withDefaults() ConsumerOptions {
	o.Queue = o.Queue.WithDefaults()
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Prefetch <= 0 {
		o.Prefetch = 256
	}
	o.Prefetch = max(o.Prefetch, o.Concurrency)
	host, _ := os.Hostname()
	if o.Instance == "" {
		o.Instance = host + "-" + strconv.Itoa(os.Getpid()) + "-" + NewEventID()[24:]
	}
	if o.Name == "" && len(os.Args) > 0 {
		o.Name = os.Args[0]
	}
	if o.Classifier == nil {
		o.Classifier = o.Queue.Classifier()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReceiveWait <= 0 {
		o.ReceiveWait = time.Second
	}
	if o.SettleBatch <= 0 {
		o.SettleBatch = 512
	}
	if o.AbandonGrace <= 0 {
		o.AbandonGrace = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.KeyPoll <= 0 {
		o.KeyPoll = time.Second
	}
	return o
}

// Consumer consumes one queue through a transport, applying the lifecycle
// rules of DESIGN §4 to every delivery.
type Consumer struct {
	t      transport.Transport
	h      Handler
	o      ConsumerOptions
	policy retry.Policy
	host   string
	log    *slog.Logger

	br *breaker // nil when the queue has no circuit breaker

	dlLog deadLetterLog // rate-limits the per-dead-letter log line

	mu       sync.Mutex
	cond     *sync.Cond
	inflight int

	kmu  sync.Mutex
	keyQ map[string][]job // ordered queues: the keys being processed, with what waits behind them
}

// job is one delivery on its way to a worker; probe marks the half-open
// breaker's probe.
type job struct {
	d     *transport.Delivery
	probe bool
}

// NewConsumer returns a consumer of o.Queue through t calling h. The queue
// configuration is validated; every problem is reported at once.
func NewConsumer(t transport.Transport, h Handler, o ConsumerOptions) (*Consumer, error) {
	if t == nil || h == nil {
		return nil, fmt.Errorf("%w: NewConsumer needs a transport and a handler", ErrInvalidConfig)
	}
	o = o.withDefaults()
	if err := o.Queue.Validate(); err != nil {
		return nil, err
	}
	if err := checkOrdering(t, o); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	c := &Consumer{t: t, h: h, o: o, policy: o.Queue.Policy(), host: host,
		log: o.Logger.With("queue", o.Queue.Name, "consumer", o.Instance), keyQ: map[string][]job{}}
	c.cond = sync.NewCond(&c.mu)
	if o.Queue.BreakerEnabled() {
		c.br = newBreaker(o.Queue, o.Now, c.breakerChanged)
	}
	return c, nil
}

// breakerChanged logs and reports a breaker state change.
func (c *Consumer) breakerChanged(from, to BreakerState) {
	switch to {
	case BreakerOpen:
		c.log.Warn("circuit breaker open: fetching stops; failures are held without spending retries",
			"from", string(from), "cooldown_ms", c.o.Queue.Settings().BreakerCooldownMillis)
	default:
		c.log.Info("circuit breaker "+string(to), "from", string(from))
	}
	c.observe(context.Background(), Event{Kind: EventBreaker, Queue: c.o.Queue.Name, Breaker: to})
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// BreakerState returns the state of the consumer's circuit breaker
// (BreakerClosed when the queue has none).
func (c *Consumer) BreakerState() BreakerState {
	if c.br == nil {
		return BreakerClosed
	}
	return c.br.current()
}

// Instance returns the consumer instance ID used for leases.
func (c *Consumer) Instance() string { return c.o.Instance }

// Run consumes until ctx is cancelled, then stops fetching, lets the
// in-flight handlers finish, settles them and returns nil. It returns an
// error early only if the transport is closed or refuses the queue as
// unsafe to consume (transport.ErrUnsafeQueue).
func (c *Consumer) Run(ctx context.Context) error {
	base := context.WithoutCancel(ctx)
	work := make(chan job)
	settles := make(chan settleReq, c.o.SettleBatch)
	settlerDone := make(chan struct{})
	go func() {
		c.settleLoop(base, settles)
		close(settlerDone)
	}()
	var workers sync.WaitGroup
	for range c.o.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range work {
				if key := c.orderKey(j.d); c.ordered() && key != "" {
					c.runKey(base, key, j, settles)
					continue
				}
				settles <- c.process(base, j.d, j.probe)
			}
		}()
	}
	polled := make(chan struct{})
	if c.ordered() {
		c.resumeKeys(ctx)
		go func() {
			c.keyPoll(ctx)
			close(polled)
		}()
	} else {
		close(polled)
	}
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	err := c.fetchLoop(ctx, work)
	stop()
	close(work)
	workers.Wait()
	<-polled
	close(settles)
	<-settlerDone
	if st, ok := c.t.(transport.ConsumerStopper); ok {
		if serr := st.StopConsumer(base, &transport.StopParams{Queue: c.o.Queue.Name, Consumer: c.o.Instance}); serr != nil {
			c.log.Warn("stopping the transport's consumer failed", "err", serr)
		}
	}
	return err
}

// fetchLoop receives deliveries and hands them to the workers. A
// redelivered message (delivery count above 1: its previous holder died or
// released it) is run alone, with nothing else in flight, and the loop stays
// cautious — one at a time — until first-time deliveries flow again, so that
// a crash-type poison takes no innocent neighbours with it. While the
// circuit breaker is open it fetches nothing; half-open, one probe.
func (c *Consumer) fetchLoop(ctx context.Context, work chan<- job) error {
	cautious := false
	backoff := 50 * time.Millisecond
	for {
		probe := false
		if c.br != nil {
			p, wait, blocked := c.br.gate()
			if blocked {
				if !c.pause(ctx, wait) {
					return nil
				}
				continue
			}
			probe = p
		}
		n := c.waitCapacity(ctx, cautious || probe)
		if n == 0 {
			if probe {
				c.br.unprobe()
			}
			return nil
		}
		ds, err := c.t.Receive(ctx, &transport.ReceiveParams{
			Queue: c.o.Queue.Name, Max: n, Wait: c.o.ReceiveWait,
			Consumer: c.o.Instance, Prefetch: c.o.Prefetch, IsolateRedeliveries: true, KeyOrder: c.ordered(),
		})
		if probe && len(ds) == 0 {
			c.br.unprobe()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrUnsafeQueue) {
				return fmt.Errorf("lily: consumer %s: %w", c.o.Queue.Name, err)
			}
			c.log.Warn("receive failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, d := range ds {
			cautious = d.DeliveryCount > 1
			if cautious {
				c.waitIdle()
			}
			c.mu.Lock()
			c.inflight++
			c.mu.Unlock()
			j := job{d: d, probe: probe}
			if key := c.orderKey(d); c.ordered() && key != "" && c.queueBehindKey(key, j) {
				continue
			}
			work <- j
		}
	}
}

// probePoll is how often the fetch loop looks again while a probe is in
// flight.
const probePoll = 10 * time.Millisecond

// pause waits while the breaker blocks fetching: until the cooldown has
// passed, or (wait = 0: a probe in flight) a short while. It returns false
// when ctx is done.
func (c *Consumer) pause(ctx context.Context, wait time.Duration) bool {
	if wait <= 0 {
		wait = probePoll
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitCapacity blocks until deliveries may be fetched and returns how many
// (0 when ctx is done). It fetches in batches: when not cautious it waits
// until at least half the prefetch window is free (or nothing is in flight).
func (c *Consumer) waitCapacity(ctx context.Context, cautious bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ctx.Err() == nil {
		free := c.o.Prefetch - c.inflight
		switch {
		case cautious && c.inflight == 0:
			return 1
		case !cautious && (c.inflight == 0 || free >= (c.o.Prefetch+1)/2):
			return free
		}
		c.cond.Wait()
	}
	return 0
}

// waitIdle blocks until nothing is in flight.
func (c *Consumer) waitIdle() {
	c.mu.Lock()
	for c.inflight > 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// release frees n prefetch slots.
func (c *Consumer) release(n int) {
	c.mu.Lock()
	c.inflight -= n
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *Consumer) observe(ctx context.Context, e Event) {
	for _, h := range c.o.Hooks {
		h.Observe(ctx, e)
	}
}
