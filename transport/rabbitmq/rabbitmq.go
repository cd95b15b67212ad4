// Package rabbitmq is Lily's RabbitMQ transport (amqp091-go), with the
// topology of docs/design.md §6: quorum queues with a broker-side delivery limit and
// at-least-once dead-lettering, TTL delay buckets that return a message to
// its own queue only, and a dead-letter queue per queue.
//
// Every hand-off publishes the copy with mandatory on a confirm-mode channel
// and waits for the broker's confirm before the original is acknowledged;
// a nack, a return (unroutable) or a timeout leaves the original
// unacknowledged and reports the settlement as failed. A copy refused by a
// full target (reject-publish) is published again, with backoff, while its
// original stays held (Options.RefusedHold): a release would raise the
// broker's delivery count and run the handler again.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

var (
	_ transport.Transport         = (*Transport)(nil)
	_ transport.Declarer          = (*Transport)(nil)
	_ transport.LeaseRecoverer    = (*Transport)(nil)
	_ transport.InFlightCounter   = (*Transport)(nil)
	_ transport.Featurer          = (*Transport)(nil)
	_ transport.ConsumerStopper   = (*Transport)(nil)
	_ transport.DeadLetterDrainer = (*Transport)(nil)
	_ transport.DeadLetterCounter = (*Transport)(nil)
	_ transport.ConcurrentSettler = (*Transport)(nil)
)

// DefaultURL is the URL of a local broker with the default account.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// Options configure the transport. The zero value connects to DefaultURL.
type Options struct {
	// URL of the broker. Defaults to DefaultURL.
	URL string
	// ConfirmTimeout bounds the wait for a publish confirm; past it the
	// hand-off counts as failed (the original stays). Defaults to 10s.
	ConfirmTimeout time.Duration
	// Publishers is the number of confirm-mode channels used in parallel.
	// Defaults to 2.
	Publishers int
	// Logger receives connection events. Defaults to slog.Default().
	Logger *slog.Logger
	// RefusedHold bounds how long a hand-off refused by a full target (a
	// dead-letter queue or retry bucket at its max-length, reject-publish)
	// is published again while its original stays held unacknowledged
	// (see Transport.Settle). Defaults to 5 minutes; negative: until the
	// Settle context ends.
	RefusedHold time.Duration
	// RefusedBackoff is the first wait before such a copy is published
	// again; it doubles up to RefusedBackoffMax. Default 100ms and 5s.
	RefusedBackoff, RefusedBackoffMax time.Duration
	// Management is the broker's management API. Receive reads a queue's
	// type from it (Lily consumes quorum queues only; see checkQueueType),
	// and InFlight counts what the broker holds for every consumer, in
	// every process (unacknowledged deliveries, messages in the
	// dead-letter process), not only this process's deliveries
	// (InFlightParts). Nil: the type check derives it from URL
	// (ManagementFor) and InFlight counts what AMQP shows. Defaults to nil.
	Management *Management
}

func (o Options) withDefaults() Options {
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.ConfirmTimeout <= 0 {
		o.ConfirmTimeout = 10 * time.Second
	}
	if o.Publishers <= 0 {
		o.Publishers = 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RefusedHold == 0 {
		o.RefusedHold = 5 * time.Minute
	}
	if o.RefusedBackoff <= 0 {
		o.RefusedBackoff = 100 * time.Millisecond
	}
	if o.RefusedBackoffMax <= 0 {
		o.RefusedBackoffMax = 5 * time.Second
	}
	o.RefusedBackoffMax = max(o.RefusedBackoffMax, o.RefusedBackoff)
	return o
}

// Transport is the RabbitMQ transport.
type Transport struct {
	opts Options

	mu        sync.Mutex
	conn      *amqp.Connection
	gen       uint64 // connection generation; receipts of older ones are void
	maxFrame  int    // frame_max negotiated on conn (0: no limit)
	specs     transport.Specs
	consumers map[consumerKey]*consumer
	// typeChecked are the queues whose type was checked (quorum, or
	// unknown: management API unreachable).
	typeChecked map[string]bool
	pubs        chan *publisher // idle publishers of the current connection
	closed      bool

	mgmtWarned atomic.Bool  // the management API's absence was logged (inflight.go)
	mgmtHTTP   *http.Client // the management API's client unless Options.Management brings one
}

// Open connects to the broker.
func Open(ctx context.Context, opts Options) (*Transport, error) {
	t := &Transport{opts: opts.withDefaults(), consumers: map[consumerKey]*consumer{}, typeChecked: map[string]bool{},
		mgmtHTTP: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	if m := t.opts.Management; m != nil && m.Client == nil {
		own := *m // the transport's own HTTP client: Close ends its idle connections
		own.Client = t.mgmtHTTP
		t.opts.Management = &own
	}
	if _, err := t.connection(ctx); err != nil {
		t.mgmtHTTP.CloseIdleConnections()
		return nil, err
	}
	return t, nil
}

// Features describes the transport.
func (t *Transport) Features() transport.Features {
	return transport.Features{BrokerDeliveryLimit: true, DelayedRetry: true}
}

// connection returns the live connection, dialling a new one (with
// backoff, until ctx ends) when it was lost.
func (t *Transport) connection(ctx context.Context) (*amqp.Connection, error) {
	backoff := 100 * time.Millisecond
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, transport.ErrClosed
		}
		if t.conn != nil && !t.conn.IsClosed() {
			c := t.conn
			t.mu.Unlock()
			return c, nil
		}
		conn, fc, err := dial(t.opts.URL)
		if err == nil {
			t.conn = conn
			t.gen++
			t.maxFrame = conn.Config.FrameSize
			if limit, ok := fc.FrameMax(); ok {
				t.maxFrame = limit // what the broker takes; the client reads more (frameconn.go)
			}
			t.mu.Unlock()
			return conn, nil
		}
		t.mu.Unlock()
		t.opts.Logger.Warn("rabbitmq: connect failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("rabbitmq: connect %s: %w (last error: %v)", redactURL(t.opts.URL), ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// dial connects to url through a frameConn (frameconn.go), which lets
// the client read frames the broker sends over frame_max; fc reports the
// broker's frame_max (not rewritten over TLS: see frameconn.go).
func dial(url string) (conn *amqp.Connection, fc *frameConn, err error) {
	fc = newFrameConn(nil)
	tls := strings.HasPrefix(strings.ToLower(url), "amqps://")
	cfg := amqp.Config{Properties: amqp.Table{"connection_name": "lily"}, Heartbeat: 10 * time.Second,
		// No limit of the client's own: the broker's frame_max (as the
		// frameConn presents it) is the connection's.
		FrameSize: amqp.FrameSizeUnlimited,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := amqp.DefaultDial(30*time.Second)(network, addr)
			if err != nil || tls {
				return c, err
			}
			fc.Conn = c
			return fc, nil
		}}
	conn, err = amqp.DialConfig(url, cfg)
	return conn, fc, err
}

// channel opens a new channel on the live connection.
func (t *Transport) channel(ctx context.Context) (*amqp.Channel, uint64, error) {
	for attempt := 0; ; attempt++ {
		conn, err := t.connection(ctx)
		if err != nil {
			return nil, 0, err
		}
		t.mu.Lock()
		gen := t.gen
		t.mu.Unlock()
		ch, err := conn.Channel()
		if err == nil {
			return ch, gen, nil
		}
		if attempt >= 2 || !errors.Is(err, amqp.ErrClosed) {
			return nil, 0, fmt.Errorf("rabbitmq: open channel: %w", err)
		}
	}
}

// Close closes the connection; unacknowledged deliveries go back to their
// queues.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	conn := t.conn
	t.mu.Unlock()
	t.mgmtHTTP.CloseIdleConnections()
	// Without t.mu: invalidate takes a consumer's lock, which Receive
	// holds while it opens a channel (and that takes t.mu).
	// Acknowledgements just sent must reach their queues before the close
	// (fence.go); the consumers' fences run side by side.
	var wg sync.WaitGroup
	for _, c := range t.consumersOf(func(consumerKey) bool { return true }) {
		wg.Go(func() { c.closeSettled(context.Background()) })
	}
	wg.Wait()
	if conn != nil {
		return conn.Close()
	}
	return nil
}

// register remembers a queue's spec: its exchange names the retry and
// dead-letter exchanges of its hand-offs.
func (t *Transport) register(specs ...transport.QueueSpec) {
	t.specs.Register(specs...)
}

// Register tells the transport about queues whose topology was declared
// elsewhere (lily topology apply), without touching the broker.
func (t *Transport) Register(specs ...transport.QueueSpec) { t.register(specs...) }

func (t *Transport) spec(queue string) (transport.QueueSpec, error) {
	s, ok := t.specs.Lookup(queue)
	if !ok {
		return s, fmt.Errorf("rabbitmq: queue %q is not declared or registered with this transport (Declare or Register its spec)", queue)
	}
	return s, nil
}

// redactURL hides the password of an AMQP URL for error messages.
func redactURL(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "<invalid URL>"
	}
	if uri.Password != "" {
		uri.Password = "***"
	}
	return uri.String()
}
