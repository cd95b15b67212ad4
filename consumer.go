package lily

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/retry"
	"github.com/lily-mq/lily/transport"
)

// ConsumerOptions configure a Consumer. The zero value of every field but
// Queue means its default.
type ConsumerOptions struct {
	// Queue is the queue to consume and its retry and dead-letter settings.
	Queue QueueConfig
	// Concurrency is the number of handlers running at once, abandoned
	// ones included. Defaults to 4.
	Concurrency int
	// Prefetch is the most deliveries held (received, not yet settled) at
	// once. On a transport with leases the consumer holds fewer while
	// handlers are slow: what its handlers can start within half a lease.
	// Defaults to 256.
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
	// TracerProvider, when set, traces each handler attempt with
	// OpenTelemetry: a consumer span per delivery, a child of the
	// producer's W3C traceparent header, with the messaging semantic
	// conventions, the delivery and retry counts and the outcome; the
	// handler's context carries it. Defaults to nil: no spans.
	TracerProvider trace.TracerProvider
	// ReceiveWait is how long one Receive call waits for messages.
	// Defaults to 1s.
	ReceiveWait time.Duration
	// SettleBatch is the most settlements committed together (group
	// commit). Defaults to 512.
	SettleBatch int
	// AbandonGrace is how long a handler may run past its timeout (after
	// its context was cancelled) before it is abandoned: its delivery is
	// then handled as a transient failure (counted by the breaker, retried
	// or held in a bucket — never released, which would raise its delivery
	// count), and the handler keeps its handler slot until it returns.
	// Defaults to 1s.
	AbandonGrace time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Keys keeps the held keys of a queue whose ordering is "park" or
	// "block" (the catalog's held keys, *redrive.Keys). Required for those orderings;
	// unused for "reorder".
	Keys KeyStore
	// KeyPoll is how often held keys are looked after: a blocked key whose
	// head was discarded moves on, an allowed entry not yet sent (after a
	// crash) is sent. Defaults to 1s.
	KeyPoll time.Duration
	// Presence receives the consumer's heartbeat state (start, breaker,
	// pause reached, stop) and tells it whether its queue is paused
	// (docs/design.md §9.10): while paused, nothing is fetched. Defaults
	// to the transport's when it implements transport.Presence
	// (ledger.Accounted); a *presence.Beat on the catalog otherwise (the
	// SQLite transport); none: never paused, no heartbeat.
	Presence transport.Presence
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
// rules of docs/design.md §4 to every delivery.
type Consumer struct {
	t      transport.Transport
	h      Handler
	o      ConsumerOptions
	policy retry.Policy
	host   string
	log    *slog.Logger
	// tracer traces handler attempts when tracing (a TracerProvider
	// was given).
	tracer  trace.Tracer
	tracing bool

	br *breaker // nil when the queue has no circuit breaker

	pres   transport.Presence // nil: no heartbeat, never paused
	paused atomic.Bool        // the fetch loop is held by a queue pause

	dlLog deadLetterLog // rate-limits the per-dead-letter log line

	mu       sync.Mutex
	cond     *sync.Cond
	inflight int                  // tickets issued and not finished
	held     map[*ticket]struct{} // the same tickets, when leases are extended

	features transport.Features // the transport's, when it tells (transport.Featurer)
	lease    time.Duration      // the transport's lease; 0: none
	extender transport.LeaseExtender
	unrecv   transport.Unreceiver
	canceler transport.ConsumeCanceller
	avgCall  atomic.Int64 // handler pace, ns (window)

	slots     chan struct{} // one per running handler, abandoned ones included
	abandoned atomic.Int64  // handlers abandoned past their timeout, still running
	stopping  context.Context

	kmu  sync.Mutex
	keyQ map[string][]*ticket // ordered queues: the keys being processed, with what waits behind them
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
	if err := checkLease(t, o); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	c := &Consumer{t: t, h: h, o: o, policy: o.Queue.Policy(), host: host,
		log: o.Logger.With("queue", o.Queue.Name, "consumer", o.Instance), keyQ: map[string][]*ticket{},
		slots: make(chan struct{}, o.Concurrency)}
	c.cond = sync.NewCond(&c.mu)
	c.tracer, c.tracing = newTracer(o.TracerProvider), o.TracerProvider != nil
	c.features = transport.FeaturesOf(t, o.Queue.Name)
	if c.features.Leases {
		c.lease = c.features.VisibilityTimeout
	}
	if ex, ok := t.(transport.LeaseExtender); ok && c.lease > 0 {
		c.extender, c.held = ex, map[*ticket]struct{}{}
	}
	c.unrecv, _ = t.(transport.Unreceiver)
	c.canceler, _ = t.(transport.ConsumeCanceller)
	if o.Queue.BreakerEnabled() {
		c.br = newBreaker(o.Queue, o.Now, c.breakerChanged)
	}
	c.pres = o.Presence
	if c.pres == nil {
		c.pres, _ = t.(transport.Presence)
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
	c.report(context.Background(), false)
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

// Run consumes until ctx is cancelled, then stops gracefully and returns
// nil: it stops fetching, gives back what it received and no handler saw
// (uncounted, where the transport can: transport.Unreceiver; otherwise it
// processes it), cancels the broker's subscription and processes what the
// broker had already pushed (transport.ConsumeCanceller), lets the running
// handlers finish, settles everything and only then closes the transport's
// consumer. A handler abandoned past its timeout is not waited for. Run
// returns an error early only if the transport is closed or refuses the
// queue as unsafe to consume (transport.ErrUnsafeQueue).
func (c *Consumer) Run(ctx context.Context) error {
	// The handlers' contexts carry the hooks (Observe), set once here.
	base := withObserver(context.WithoutCancel(ctx), c.observe)
	c.stopping = ctx
	c.report(base, false)
	work := make(chan *ticket)
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
			for t := range work {
				if key := c.orderKey(t.d); c.ordered() && key != "" {
					c.runKey(base, key, t, settles)
					continue
				}
				settles <- c.process(base, t)
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
	extCtx, stopExt := context.WithCancel(base)
	extended := make(chan struct{})
	if c.extender != nil {
		go func() {
			c.extendLoop(extCtx)
			close(extended)
		}()
	} else {
		close(extended)
	}
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	left, err := c.fetchLoop(ctx, work) // left is nil with an error
	if err == nil {
		c.drain(base, left, work)
	}
	stop()
	close(work)
	workers.Wait()
	<-polled
	close(settles)
	<-settlerDone
	stopExt()
	<-extended
	if st, ok := c.t.(transport.ConsumerStopper); ok {
		if serr := st.StopConsumer(base, &transport.StopParams{Queue: c.o.Queue.Name, Consumer: c.o.Instance, Ordered: c.ordered()}); serr != nil {
			c.log.Warn("stopping the transport's consumer failed", "err", serr)
		}
	}
	c.report(base, true)
	return err
}

// receiveParams are the consumer's Receive arguments for up to n.
func (c *Consumer) receiveParams(n int, wait time.Duration) *transport.ReceiveParams {
	return &transport.ReceiveParams{
		Queue: c.o.Queue.Name, Max: n, Wait: wait,
		Consumer: c.o.Instance, Prefetch: c.o.Prefetch, IsolateRedeliveries: true, KeyOrder: c.ordered(),
	}
}

// fetchLoop receives deliveries and hands them to the workers until ctx is
// done. A redelivered message (delivery count above 1: its previous holder
// died or released it) is run alone, with nothing else in flight, and the
// loop stays cautious — one at a time — until first-time deliveries flow
// again, so that a crash-type poison takes no innocent neighbours with it.
// While the circuit breaker is open it fetches nothing; half-open, one
// probe. What it received and could not hand out before ctx ended it
// returns, for drain to give back.
func (c *Consumer) fetchLoop(ctx context.Context, work chan<- *ticket) ([]*ticket, error) {
	cautious := false
	backoff := 50 * time.Millisecond
	for {
		if !c.obeyPause(ctx) {
			return nil, nil
		}
		var probe uint64
		if c.br != nil {
			p, wait, blocked := c.br.gate()
			if blocked {
				if !c.pause(ctx, wait) {
					return nil, nil
				}
				continue
			}
			probe = p
		}
		n := c.waitCapacity(ctx, cautious || probe != 0)
		if n == 0 {
			c.br.endProbe(probe)
			return nil, nil
		}
		if probe == 0 && c.br != nil && c.br.current() != BreakerClosed {
			continue // it opened while we waited for capacity: ask the gate again
		}
		asked := c.o.Now()
		ds, err := c.t.Receive(ctx, c.receiveParams(n, c.o.ReceiveWait))
		if len(ds) == 0 {
			c.br.endProbe(probe)
		}
		if err != nil && len(ds) == 0 {
			if ctx.Err() != nil {
				return nil, nil
			}
			if errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrUnsafeQueue) {
				return nil, fmt.Errorf("lily: consumer %s: %w", c.o.Queue.Name, err)
			}
			c.log.Warn("receive failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return nil, nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		ts := c.take(ds, probe, asked)
		for i, t := range ts {
			cautious = t.d.DeliveryCount > 1
			if ctx.Err() != nil || (cautious && !c.waitIdle(ctx, len(ts)-i)) || !c.dispatch(ctx, t, work) {
				// Received, seen by no handler: given back by drain once
				// the subscription is cancelled (see drain).
				return ts[i:], nil
			}
		}
	}
}

// drain runs at a graceful stop, after fetchLoop, with left, what fetchLoop
// had received and dispatched to no handler: on a transport where the
// broker pushes deliveries it cancels the subscription and processes what
// had been pushed already — closing the channel with them on it would give
// them back with their counts raised, to a successor that then takes them
// one at a time. left is given back only after the cancel: giving it back
// acknowledges it, and acknowledgements sent while still subscribed free
// credit that the broker fills with new pushes — a quorum queue can send
// some of those after the cancel's reply, where the client library drops
// them and the channel's close returns them with their counts raised.
func (c *Consumer) drain(base context.Context, left []*ticket, work chan<- *ticket) {
	if c.canceler == nil {
		c.giveBack(base, left, work)
		return
	}
	sp := &transport.StopParams{Queue: c.o.Queue.Name, Consumer: c.o.Instance, Ordered: c.ordered()}
	err := c.canceler.CancelConsume(base, sp)
	c.giveBack(base, left, work)
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return // a wrapper over a transport that pushes nothing
		}
		c.log.Warn("cancelling the subscription failed; what the broker pushed comes back with its counts raised", "err", err)
		return
	}
	for {
		asked := c.o.Now()
		ds, err := c.t.Receive(base, c.receiveParams(c.o.Prefetch, 0))
		if err != nil || len(ds) == 0 {
			if err != nil {
				c.log.Warn("receiving what the broker pushed before the stop failed", "err", err)
			}
			return
		}
		// Pushed but seen by no handler: given back uncounted where the
		// transport can, processed otherwise.
		c.giveBack(base, c.take(ds, 0, asked), work)
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
// until at least half the window is free (or nothing is in flight).
func (c *Consumer) waitCapacity(ctx context.Context, cautious bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ctx.Err() == nil {
		w := c.window()
		free := w - c.inflight
		switch {
		case cautious && c.inflight == 0:
			return 1
		case !cautious && (c.inflight == 0 || free >= (w+1)/2):
			return max(free, 1)
		}
		c.cond.Wait()
	}
	return 0
}

// waitIdle blocks until no more than keep tickets are in flight (the
// delivery about to run alone and those received with it, not yet handed
// out). It returns false when ctx ended first.
func (c *Consumer) waitIdle(ctx context.Context, keep int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.inflight > keep {
		if ctx.Err() != nil {
			return false
		}
		c.cond.Wait()
	}
	return true
}

func (c *Consumer) observe(ctx context.Context, e Event) {
	for _, h := range c.o.Hooks {
		h.Observe(ctx, e)
	}
}
