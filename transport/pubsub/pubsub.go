package pubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/lily-mq/lily/transport"
)

// Compile-time checks of the interfaces the transport implements.
var (
	_ transport.Transport         = (*Transport)(nil)
	_ transport.Declarer          = (*Transport)(nil)
	_ transport.Featurer          = (*Transport)(nil)
	_ transport.LeaseExtender     = (*Transport)(nil)
	_ transport.LeaseRecoverer    = (*Transport)(nil)
	_ transport.DeadLetterDrainer = (*Transport)(nil)
	_ transport.InFlightCounter   = (*Transport)(nil)
)

// ErrNoCount is returned by InFlight when Options.InFlight is not set; it
// wraps transport.ErrNoCount.
var ErrNoCount = fmt.Errorf("pubsub: the Pub/Sub API cannot count a subscription's messages: set Options.InFlight (e.g. from Cloud Monitoring's subscription/num_undelivered_messages) for lily reconcile: %w", transport.ErrNoCount)

// InFlight counts the queue's unacknowledged messages with
// Options.InFlight.
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	if t.o.InFlight == nil {
		return 0, ErrNoCount
	}
	return t.o.InFlight(ctx, queue, t.Names(queue))
}

// QueueNames are the Pub/Sub resource IDs of one Lily queue.
type QueueNames struct {
	// Topic the queue's producers publish to. Defaults to the queue name.
	Topic string
	// Subscription Lily consumes. Defaults to the queue name (topics and
	// subscriptions have separate namespaces in Pub/Sub).
	Subscription string
}

// Options configure a Transport.
type Options struct {
	// Project is the Google Cloud project ID. Required.
	Project string
	// Endpoint is host:port of the Pub/Sub API. Defaults to Google's
	// (pubsub.googleapis.com:443, credentials from the environment).
	Endpoint string
	// Insecure dials Endpoint in plaintext without credentials: the
	// emulator or pstest. Defaults to false.
	Insecure bool
	// ClientOptions are passed to the Google API clients as well. Defaults
	// to none.
	ClientOptions []option.ClientOption
	// Queues maps a Lily queue name to its topic and subscription. A queue
	// not listed uses its name for both. Defaults to none.
	Queues map[string]QueueNames
	// AckDeadline is the lease: the subscription's ack deadline (whole
	// seconds, 10..600; down to 1 with Insecure, for pstest), extended with ModifyAckDeadline while a handler
	// runs. Defaults to 60s.
	AckDeadline time.Duration
	// MaxDeliveryAttempts is the dead-letter policy's limit that Declare
	// sets on the subscriptions (5..100). It must exceed the queue's
	// delivery_limit, so that Lily dead-letters with evidence before the
	// broker forwards without any. Defaults to delivery_limit + 2, at
	// least 5.
	MaxDeliveryAttempts int
	// PollInterval is the pause between two empty pulls while Receive
	// waits. Defaults to 50ms.
	PollInterval time.Duration
	// HoldInProcess: a retry copy due within this long is held by the
	// transport (no handler, no worker) instead of by a ModifyAckDeadline,
	// whose granularity is one second. Defaults to 1s.
	HoldInProcess time.Duration
	// RPCTimeout bounds every RPC (publish confirms included). Defaults to
	// 30s.
	RPCTimeout time.Duration
	// Logger receives the transport's warnings. Defaults to discarding.
	Logger *slog.Logger
	// InFlight counts a queue's messages not acknowledged yet (main,
	// retry-return and delay subscriptions), for the ledger (lily
	// reconcile). The Pub/Sub API cannot count messages; a deployment
	// plugs in Cloud Monitoring's subscription/num_undelivered_messages
	// (which lags by minutes), tests the fake's own records. Defaults to
	// none: InFlight then returns an error saying so.
	InFlight func(ctx context.Context, queue string, names QueueNames) (int64, error)
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.AckDeadline == 0 {
		o.AckDeadline = 60 * time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = 50 * time.Millisecond
	}
	if o.HoldInProcess == 0 {
		o.HoldInProcess = time.Second
	}
	if o.RPCTimeout == 0 {
		o.RPCTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Validate reports every invalid option at once.
func (o Options) Validate() error {
	var errs []error
	if o.Project == "" {
		errs = append(errs, errors.New("pubsub: project is empty: set the Google Cloud project ID (pubsub_project in lily.toml)"))
	}
	minAck := 10 * time.Second
	if o.Insecure {
		minAck = time.Second // an emulator or pstest accepts shorter ones
	}
	if o.AckDeadline < minAck || o.AckDeadline > 600*time.Second || o.AckDeadline%time.Second != 0 {
		errs = append(errs, fmt.Errorf("pubsub: ack deadline %s is not whole seconds in %s..600s (Pub/Sub's range): set pubsub_ack_deadline_seconds to 10..600", o.AckDeadline, minAck))
	}
	if o.MaxDeliveryAttempts != 0 && (o.MaxDeliveryAttempts < 5 || o.MaxDeliveryAttempts > 100) {
		errs = append(errs, fmt.Errorf("pubsub: max delivery attempts %d is outside Pub/Sub's 5..100: set pubsub_max_delivery_attempts within it", o.MaxDeliveryAttempts))
	}
	for q, n := range o.Queues {
		for what, id := range map[string]string{"topic": n.Topic, "subscription": n.Subscription} {
			if id != "" {
				if err := checkID(id); err != nil {
					errs = append(errs, fmt.Errorf("pubsub: queue %s: %s %q: %w", q, what, id, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Transport is the Google Pub/Sub transport. Create it with Open.
type Transport struct {
	o     Options
	conn  *grpc.ClientConn // owned when Insecure
	pub   *vkit.TopicAdminClient
	sub   *vkit.SubscriptionAdminClient
	specs transport.Specs

	mu       sync.Mutex
	closed   bool
	held     map[string]*held // ack ID → delivery handed out, not settled
	buffered map[string][]*transport.Delivery
	checked  map[string]bool // subscriptions whose dead-letter policy was checked
	returns  map[string]bool // retry-return subscriptions: exist or not (giveback.go)
	holds    map[string][]*pending
	moved    map[string]time.Time
	bold     map[string]bool // queues pulled in batches (see pullMax)
}

// held is a delivery handed to a consumer instance and not settled yet.
type held struct {
	consumer string
	sub      string
}

// Open connects to Pub/Sub. It does not create anything; see Declare.
func Open(ctx context.Context, o Options) (*Transport, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	t := &Transport{o: o, held: map[string]*held{}, buffered: map[string][]*transport.Delivery{},
		checked: map[string]bool{}, returns: map[string]bool{}, holds: map[string][]*pending{}, moved: map[string]time.Time{}, bold: map[string]bool{}}
	opts := append([]option.ClientOption(nil), o.ClientOptions...)
	if o.Insecure {
		if o.Endpoint == "" {
			return nil, errors.New("pubsub: insecure needs an endpoint (host:port of the emulator): set pubsub_endpoint")
		}
		conn, err := grpc.NewClient(o.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("pubsub: dial %s: %w", o.Endpoint, err)
		}
		t.conn = conn
		opts = append(opts, option.WithGRPCConn(conn))
	} else if o.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(o.Endpoint))
	}
	var err error
	if t.pub, err = vkit.NewTopicAdminClient(ctx, opts...); err != nil {
		t.closeConn()
		return nil, fmt.Errorf("pubsub: publisher client: %w", err)
	}
	if t.sub, err = vkit.NewSubscriptionAdminClient(ctx, opts...); err != nil {
		t.pub.Close()
		t.closeConn()
		return nil, fmt.Errorf("pubsub: subscriber client: %w", err)
	}
	return t, nil
}

func (t *Transport) closeConn() {
	if t.conn != nil {
		t.conn.Close()
	}
}

// Features: the broker counts deliveries (DeliveryAttempt) but Lily, not
// the broker, dead-letters at delivery_limit (the broker's
// max_delivery_attempts is set above it, as a backstop whose dead letters
// carry no Lily evidence); retries wait in delay subscriptions; leases are
// ack deadlines.
func (t *Transport) Features() transport.Features {
	return transport.Features{DelayedRetry: true, Leases: true, VisibilityTimeout: t.o.AckDeadline}
}

// Close gives back what was pulled and never handed out, and closes the
// clients. Deliveries handed out and not settled come back when their ack
// deadline passes.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	var back []*transport.Delivery
	for q, ds := range t.buffered {
		back = append(back, ds...)
		delete(t.buffered, q)
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), t.o.RPCTimeout)
	if len(back) > 0 {
		t.modify(ctx, back, 0)
	}
	t.dropHolds(ctx)
	cancel()
	err := errors.Join(t.sub.Close(), t.pub.Close())
	t.closeConn()
	return err
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Names returns the topic and subscription of queue.
func (t *Transport) Names(queue string) QueueNames { return t.o.names(queue) }

func (o Options) names(queue string) QueueNames {
	n := o.Queues[queue]
	if n.Topic == "" {
		n.Topic = queue
	}
	if n.Subscription == "" {
		n.Subscription = queue
	}
	return n
}

// DeadLetterTopic is Lily's dead-letter topic (and its subscription) of a
// subscription: "<subscription>.dlt".
func DeadLetterTopic(subscription string) string { return subscription + ".dlt" }

// ReturnTopic is where due retry copies come back to (and its
// subscription, which Receive pulls beside the main one):
// "<subscription>.retry". Only this subscription reads it, so a retry never
// reaches the topic's other subscribers.
func ReturnTopic(subscription string) string { return subscription + ".retry" }

// DelayTopic is the delay bucket of ms milliseconds (and its subscription):
// "<subscription>.retry.<ms>ms".
func DelayTopic(subscription string, ms int64) string {
	return subscription + ".retry." + strconv.FormatInt(ms, 10) + "ms"
}

func (t *Transport) topicPath(id string) string { return "projects/" + t.o.Project + "/topics/" + id }
func (t *Transport) subPath(id string) string {
	return "projects/" + t.o.Project + "/subscriptions/" + id
}

// rpc returns a context bounded by the RPC timeout.
func (t *Transport) rpc(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.o.RPCTimeout)
}

// checkID checks a Pub/Sub resource ID: 3..255 characters, starting with a
// letter, of letters, digits and - _ . ~ + %, not starting with "goog".
func checkID(id string) error {
	if len(id) < 3 || len(id) > 255 {
		return fmt.Errorf("length %d is outside 3..255", len(id))
	}
	c := id[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return errors.New("must start with a letter")
	}
	if len(id) >= 4 && (id[:4] == "goog") {
		return errors.New(`must not start with "goog"`)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' || c == '+' || c == '%'
		if !ok {
			return fmt.Errorf("character %q is not allowed (letters, digits, - _ . ~ + %%)", c)
		}
	}
	return nil
}

// publish publishes messages to a topic and returns their message IDs once
// the service confirmed them. Messages with different ordering keys go in
// separate requests, at most 1000 messages and about 9 MB per request.
func (t *Transport) publish(ctx context.Context, topicID string, msgs []*pubsubpb.PubsubMessage) ([]string, error) {
	ids := make([]string, 0, len(msgs))
	for start := 0; start < len(msgs); {
		end, size := start, 0
		for end < len(msgs) && end-start < 1000 {
			s := messageSize(msgs[end])
			if end > start && (size+s > 9<<20 || msgs[end].OrderingKey != msgs[start].OrderingKey) {
				break
			}
			size += s
			end++
		}
		rctx, cancel := t.rpc(ctx)
		resp, err := t.pub.Publish(rctx, &pubsubpb.PublishRequest{Topic: t.topicPath(topicID), Messages: msgs[start:end]})
		cancel()
		if err != nil {
			if status.Code(err) == codes.NotFound {
				return ids, fmt.Errorf("pubsub: publish to topic %s: %w (run lily topology apply): %v", topicID, transport.ErrUnknownQueue, err)
			}
			return ids, fmt.Errorf("pubsub: publish to topic %s: %w", topicID, err)
		}
		if len(resp.MessageIds) != end-start {
			return ids, fmt.Errorf("pubsub: publish to topic %s: %d message IDs confirmed for %d messages", topicID, len(resp.MessageIds), end-start)
		}
		ids = append(ids, resp.MessageIds...)
		start = end
	}
	return ids, nil
}

// Publish publishes messages to the queue's topic, confirmed, in order.
// Messages for the queue's subscription alone (p.Direct: a redrive,
// redirect or release) go to its retry-return topic instead, which only
// that subscription reads (directTopic); the queue's topic would reach
// every other subscription of it too.
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	msgs := make([]*pubsubpb.PubsubMessage, len(p.Messages))
	topics := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		pm, err := toPubsub(m, m.Headers, nil)
		if err != nil {
			return fmt.Errorf("pubsub: publish to %s: message %d (event %s): %w", p.Queue, i, m.EventID, err)
		}
		msgs[i], topics[i] = pm, t.Names(p.Queue).Topic
		if p.Direct {
			if topics[i], err = t.directTopic(ctx, p.Queue, p.Redrive, m); err != nil {
				return err
			}
		}
	}
	// One publish per run of messages to the same topic, in order.
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && topics[end] == topics[start] {
			end++
		}
		if _, err := t.publish(ctx, topics[start], msgs[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}
