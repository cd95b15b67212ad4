package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport"
)

var (
	_ transport.Transport         = (*Transport)(nil)
	_ transport.Declarer          = (*Transport)(nil)
	_ transport.LeaseExtender     = (*Transport)(nil)
	_ transport.LeaseRecoverer    = (*Transport)(nil)
	_ transport.ConsumerStopper   = (*Transport)(nil)
	_ transport.DeadLetterDrainer = (*Transport)(nil)
	_ transport.DeadLetterCounter = (*Transport)(nil)
	_ transport.InFlightCounter   = (*Transport)(nil)
	_ transport.InFlightBreakdown = (*Transport)(nil)
	_ transport.Featurer          = (*Transport)(nil)
	_ transport.ConcurrentSettler = (*Transport)(nil)
)

// Defaults of Options.
const (
	// DefaultURL is the NATS server Lily connects to when no URL is given.
	DefaultURL = "nats://127.0.0.1:4222"
	// DefaultAckWait is the lease of a delivery (the consumer's AckWait).
	DefaultAckWait = 30 * time.Second
	// DefaultConsumer is the durable consumer name Lily declares.
	DefaultConsumer = "lily"
	// DefaultRetryStream holds the retry records (docs/design.md §8.8).
	DefaultRetryStream = "LILY_RETRIES"
	// DefaultMaxAckPending is the consumers' MaxAckPending: messages
	// waiting out a retry delay (NakWithDelay) count against it, so it is
	// far above the server's default of 1,000.
	DefaultMaxAckPending = 20000
)

// Retention policies of the streams Lily declares.
const (
	RetentionWorkQueue = "workqueue"
	RetentionLimits    = "limits"
)

// Binding names the JetStream objects of one Lily queue.
type Binding struct {
	// Stream holds the queue's messages.
	Stream string
	// Consumer is the durable pull consumer Lily consumes with.
	Consumer string
	// Subject is where Publish sends the queue's messages.
	Subject string
}

// Options configure a Transport.
type Options struct {
	// URL of the NATS server(s), comma-separated. Defaults to DefaultURL.
	URL string
	// Conn, when set, is used instead of dialling URL; Close leaves it open.
	Conn *natsgo.Conn
	// AckWait is the lease of a delivery: the runtime extends it with
	// InProgress while the handler runs. Defaults to DefaultAckWait.
	AckWait time.Duration
	// Retention of the queue streams Declare creates: RetentionWorkQueue
	// (acknowledged messages leave the stream; the default) or
	// RetentionLimits (they stay until the stream's limits remove them).
	Retention string
	// Replicas of the streams Declare creates. Defaults to 1.
	Replicas int
	// MaxAckPending of the consumers Declare creates. Defaults to
	// DefaultMaxAckPending.
	MaxAckPending int
	// MaxWait caps the wait of one pull request. Defaults to 5s.
	MaxWait time.Duration
	// MaxBatch caps the messages of one pull request. Defaults to 256.
	MaxBatch int
	// Queues adopts existing streams and consumers: a queue listed here
	// uses its Binding (empty fields take the defaults of QueueBinding)
	// and Declare checks them instead of creating them.
	Queues map[string]Binding
	// RetryStream is the stream of the retry records. Defaults to
	// DefaultRetryStream.
	RetryStream string
	// Logger receives the transport's warnings. Defaults to discarding.
	Logger *slog.Logger
}

// Transport is the NATS JetStream transport. It is safe for concurrent use.
type Transport struct {
	opts Options
	nc   *natsgo.Conn
	own  bool
	js   jetstream.JetStream

	mu        sync.Mutex
	consumers map[string]jetstream.Consumer // queue -> its consumer
	streams   map[string]jetstream.Stream   // stream name -> handle
	held      map[string]map[*receipt]struct{}
	stash     transport.Stash
	wary      map[string]bool
	pulls     map[pullKey]*inbox // reply subscriptions of the pull requests, per consumer instance and queue
	closed    bool
}

// withDefaults returns o with its defaults, or an error naming the bad
// option and the fix.
func (o Options) withDefaults() (Options, error) {
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.AckWait < 100*time.Millisecond {
		return o, fmt.Errorf("nats: AckWait %s: too short to extend in time; use at least 100ms (30s is the default)", o.AckWait)
	}
	switch o.Retention {
	case "":
		o.Retention = RetentionWorkQueue
	case RetentionWorkQueue, RetentionLimits:
	default:
		return o, fmt.Errorf("nats: retention %q: use %q or %q", o.Retention, RetentionWorkQueue, RetentionLimits)
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxAckPending == 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.RetryStream == "" {
		o.RetryStream = DefaultRetryStream
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// PlanOf is Plan for a transport with options o, without connecting: what
// 'lily topology plan' prints. Options it refuses give no plan.
func PlanOf(o Options, specs []transport.QueueSpec) []ObjectPlan {
	o, err := o.withDefaults()
	if err != nil {
		return nil
	}
	return (&Transport{opts: o}).Plan(specs)
}

// Open connects to the NATS server (or uses Options.Conn).
func Open(o Options) (*Transport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{opts: o, nc: o.Conn, consumers: map[string]jetstream.Consumer{}, streams: map[string]jetstream.Stream{},
		held: map[string]map[*receipt]struct{}{}, wary: map[string]bool{}, pulls: map[pullKey]*inbox{}}
	if t.nc == nil {
		nc, err := natsgo.Connect(o.URL, natsgo.Name("lily"), natsgo.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("nats: connect to %s: %w (is nats-server running with JetStream, -js?)", o.URL, err)
		}
		t.nc, t.own = nc, true
	}
	// A PubAck that never comes (a leader change without a disconnect)
	// fails its future instead of holding a settle forever. Not AckWait:
	// a short lease (2 s in tests) failed confirmed copies on a loaded
	// machine, and a failed copy is a redelivery with its count raised.
	js, err := jetstream.New(t.nc, jetstream.WithPublishAsyncTimeout(max(o.AckWait, time.Minute)))
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("nats: JetStream context: %w", err)
	}
	t.js = js
	if why := OldServer(t.nc.ConnectedServerVersion()); why != "" {
		o.Logger.Warn("nats: "+why, "url", t.nc.ConnectedUrlRedacted())
	}
	return t, nil
}

// Conn returns the NATS connection, for tools that need calls Lily does
// not wrap.
func (t *Transport) Conn() *natsgo.Conn { return t.nc }

// JetStream returns the JetStream context of the connection.
func (t *Transport) JetStream() jetstream.JetStream { return t.js }

// Features describes the transport: leases (AckWait, extended with
// InProgress) and delayed retry (NakWithDelay); Lily dead-letters at the
// delivery limit itself, from NumDelivered.
func (t *Transport) Features() transport.Features {
	return transport.Features{DelayedRetry: true, Leases: true, VisibilityTimeout: t.opts.AckWait}
}

// Close closes the connection Open dialled; later calls return
// transport.ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	// On a connection the caller owns the inboxes would outlive the
	// transport: unsubscribed, and what waits in them given back.
	t.dropPulls("", "")
	if t.own && t.nc != nil {
		// Drain flushes the acknowledgements still buffered.
		if err := t.nc.Drain(); err != nil {
			t.nc.Close()
		}
	}
	return nil
}

func (t *Transport) checkOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("nats: %w", transport.ErrClosed)
	}
	return nil
}

// StreamName is the stream Lily declares for queue: the queue's name with
// each '.' made '_' (stream names allow no dots), "orders.created" →
// "orders_created".
func StreamName(queue string) string { return strings.ReplaceAll(queue, ".", "_") }

// DeadLetterStream is the stream of queue's dead letters:
// StreamName(queue) + "_dlq".
func DeadLetterStream(queue string) string { return StreamName(queue) + "_dlq" }

// DeadLetterSubject is the subject of queue's dead letters: "lily.dlq." +
// queue.
func DeadLetterSubject(queue string) string { return "lily.dlq." + queue }

// QueueBinding returns the stream, consumer and subject of queue: those
// of Options.Queues, else StreamName(queue), DefaultConsumer and the
// queue's name as subject.
func (t *Transport) QueueBinding(queue string) Binding {
	b := t.opts.Queues[queue]
	if b.Stream == "" {
		b.Stream = StreamName(queue)
	}
	if b.Consumer == "" {
		b.Consumer = DefaultConsumer
	}
	if b.Subject == "" {
		b.Subject = queue
	}
	return b
}

// CheckQueueName returns an error naming the queue when it cannot be a
// NATS subject and stream name: no blanks, wildcards or slashes.
func CheckQueueName(queue string) error {
	if queue == "" || strings.ContainsAny(queue, " \t\r\n*>/\\") || strings.HasPrefix(queue, ".") ||
		strings.HasSuffix(queue, ".") || strings.Contains(queue, "..") {
		return fmt.Errorf("nats: queue %q: not a valid NATS subject and stream name: use letters, digits, '-', '_' and single dots between them (no blanks, '*', '>' or slashes)", queue)
	}
	return nil
}

// stream returns the handle of a stream, cached.
func (t *Transport) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	s, ok := t.streams[name]
	t.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := t.js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("nats: stream %s: %w: create it with 'lily topology apply'", name, transport.ErrUnknownQueue)
		}
		return nil, fmt.Errorf("nats: stream %s: %w", name, err)
	}
	t.mu.Lock()
	t.streams[name] = s
	t.mu.Unlock()
	return s, nil
}

// consumer returns the pull consumer of queue, cached.
func (t *Transport) consumer(ctx context.Context, queue string) (jetstream.Consumer, Binding, error) {
	b := t.QueueBinding(queue)
	if err := t.checkOpen(); err != nil {
		return nil, b, err
	}
	t.mu.Lock()
	c, ok := t.consumers[queue]
	t.mu.Unlock()
	if ok {
		return c, b, nil
	}
	c, err := t.js.Consumer(ctx, b.Stream, b.Consumer)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, b, fmt.Errorf("nats: queue %s (stream %s, consumer %s): %w: create it with 'lily topology apply'", queue, b.Stream, b.Consumer, transport.ErrUnknownQueue)
		}
		return nil, b, fmt.Errorf("nats: consumer %s of stream %s: %w", b.Consumer, b.Stream, err)
	}
	t.mu.Lock()
	t.consumers[queue] = c
	t.mu.Unlock()
	return c, b, nil
}

// forget drops the cached handles of queue (its stream was deleted).
func (t *Transport) forget(queue string) {
	b := t.QueueBinding(queue)
	t.mu.Lock()
	delete(t.consumers, queue)
	delete(t.streams, b.Stream)
	delete(t.streams, DeadLetterStream(queue))
	t.mu.Unlock()
}

// confirm waits until the server has read everything this connection sent
// before (acks, naks, progress): NATS acknowledgements are one-way, and a
// settlement is reported applied only once the server has it.
func (t *Transport) confirm(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	if err := t.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats: confirm acknowledgements with the server: %w", err)
	}
	return nil
}
