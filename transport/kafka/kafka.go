package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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
	_ transport.LeaseExtender     = (*Transport)(nil)
	_ transport.QueueFeaturer     = (*Transport)(nil)
	_ transport.ConsumeCanceller  = (*Transport)(nil)
)

// DefaultBrokers are the seed brokers used when Options names none.
var DefaultBrokers = []string{"127.0.0.1:9092"}

// Options configure the transport. The zero value connects to
// DefaultBrokers.
type Options struct {
	// Brokers are the seed brokers, "host:port". Defaults to
	// DefaultBrokers.
	Brokers []string
	// Partitions is the partition count of the topics Declare creates when
	// the main topic does not exist yet (otherwise the main topic's count
	// is used for its retry, dead-letter and attempts topics, so that a
	// copy keeps its partition number). Defaults to 3.
	Partitions int32
	// ReplicationFactor of the topics Declare creates; -1 uses the
	// broker's default. Defaults to -1.
	ReplicationFactor int16
	// Group returns the consumer group of a queue. Defaults to
	// DefaultGroup.
	Group func(queue string) string
	// Attempts is the persistent attempt counter. Defaults to the
	// compacted topic <topic>.attempts next to the queue's topics.
	// SQLAttempts keeps it in a database (e.g. the catalog's) instead.
	Attempts AttemptStore
	// StaticMembership makes each consumer instance a static group member
	// (group.instance.id = the instance name, ReceiveParams.Consumer), so
	// that a restarted instance takes its partitions back at once instead
	// of after the session timeout. Defaults to false.
	StaticMembership bool
	// SessionTimeout is how long the group waits for a silent member
	// before giving its partitions to others. Defaults to 45s.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long a rebalance waits for every member to
	// rejoin (and so bounds RevokeTimeout). Defaults to 60s.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is how often members heartbeat, and so how soon
	// they learn of a rebalance. Defaults to 3s.
	HeartbeatInterval time.Duration
	// RevokeTimeout is how long a partition that is being revoked waits for
	// its handed-out deliveries to be settled before its offsets are
	// committed and it is given up (the unsettled ones are redelivered by
	// the next owner, their counts raised). Defaults to 10s.
	RevokeTimeout time.Duration
	// ProduceTimeout bounds every produce (publish, hand-off, attempt
	// snapshot); past it the produce counts as failed and the original
	// stays. Defaults to 30s.
	ProduceTimeout time.Duration
	// MetadataMaxAge is how often consumers refresh metadata, and so how
	// soon they find retry topics created after they started. Defaults to
	// 30s.
	MetadataMaxAge time.Duration
	// DeadLetterTopics maps a queue to a dead-letter topic other than
	// <queue>.dlt, e.g. one written by Spring Kafka (DeadLetterPublishingRecoverer:
	// "<topic>.DLT"; @RetryableTopic: "<topic>-dlt"), Kafka
	// Connect or Kafka Streams, for DrainDeadLetters and DeadLetterDepth.
	// Defaults to none.
	DeadLetterTopics map[string]string
	// DeadLetterRetention maps a queue to its dead-letter topic's
	// retention (retention.ms, retention.bytes), which Declare sets and
	// Verify checks. Defaults to DLTRetention{} for every queue: 336 hours,
	// no size cap.
	DeadLetterRetention map[string]DLTRetention
	// ShareMaxRecords is how many records a share-group member fetches at
	// once (ShareFetch MaxRecords, strict) while first-time deliveries
	// flow; after a redelivery it fetches one at a time until a first-time
	// delivery comes. Every record of a fetch is settled before the next
	// one. Defaults to 64.
	ShareMaxRecords int
	// ShareLockDuration is the share groups' acquisition lock duration
	// (the broker's group.share.record.lock.duration.ms, or the group's
	// share.record.lock.duration.ms): the lease of a share-group delivery,
	// which Lily renews every fifth of it. Set it to the cluster's value if
	// that is shorter; 'lily lint --live' checks. Defaults to 30s (Kafka's
	// default).
	ShareLockDuration time.Duration
	// ClientID names the clients to the brokers. Defaults to "lily".
	ClientID string
	// ClientOpts are added to every franz-go client the transport creates
	// (TLS, SASL, ...). Defaults to none.
	ClientOpts []kgo.Opt
	// Logger receives the transport's warnings. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if len(o.Brokers) == 0 {
		o.Brokers = DefaultBrokers
	}
	if o.Partitions <= 0 {
		o.Partitions = 3
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = -1
	}
	if o.Group == nil {
		o.Group = DefaultGroup
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 45 * time.Second
	}
	if o.RebalanceTimeout <= 0 {
		o.RebalanceTimeout = 60 * time.Second
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 3 * time.Second
	}
	if o.RevokeTimeout <= 0 {
		o.RevokeTimeout = 10 * time.Second
	}
	if o.ProduceTimeout <= 0 {
		o.ProduceTimeout = 30 * time.Second
	}
	if o.MetadataMaxAge <= 0 {
		o.MetadataMaxAge = 30 * time.Second
	}
	if o.ShareMaxRecords <= 0 {
		o.ShareMaxRecords = 64
	}
	if o.ShareLockDuration <= 0 {
		o.ShareLockDuration = 30 * time.Second
	}
	if o.ClientID == "" {
		o.ClientID = "lily"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// ParseBrokers splits a comma-separated broker list ("h1:9092,h2:9092"),
// as given to --brokers, trimming spaces and dropping empty entries.
func ParseBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// RetryTopic returns the retry topic of queue for a delay of ms
// milliseconds: "<queue>.retry.<ms>ms".
func RetryTopic(queue string, ms int64) string {
	return queue + ".retry." + strconv.FormatInt(ms, 10) + "ms"
}

// GiveBackTopic returns the topic a share-group member gives redeliveries
// back through (see docs/kafka-share-groups.md): the return topic,
// "<queue>.retry.0ms" (ReturnTopic), consumed like the retry topics by the
// queue's consumer group.
func GiveBackTopic(queue string) string { return ReturnTopic(queue) }

// ParseRetryTopic splits a retry topic name into its queue and delay; ok
// is false when topic is not one.
func ParseRetryTopic(topic string) (queue string, ms int64, ok bool) {
	i := strings.LastIndex(topic, ".retry.")
	if i <= 0 || !strings.HasSuffix(topic, "ms") {
		return "", 0, false
	}
	n, err := strconv.ParseInt(topic[i+len(".retry."):len(topic)-2], 10, 64)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return topic[:i], n, true
}

// DeadLetterTopic returns Lily's dead-letter topic of queue: "<queue>.dlt".
func DeadLetterTopic(queue string) string { return queue + ".dlt" }

// AttemptsTopic returns the compacted topic that holds the attempt
// counter's snapshots for queue and its retry topics: "<queue>.attempts".
func AttemptsTopic(queue string) string { return queue + ".attempts" }

// DefaultGroup returns the consumer group of queue's consumers:
// "lily.<queue>".
func DefaultGroup(queue string) string { return "lily." + queue }

// DrainGroup returns the group whose committed offsets mark how far the
// dead-letter topic of a queue consumed by group was drained into the
// catalog: "<group>.dlt-drain".
func DrainGroup(group string) string { return group + ".dlt-drain" }

// subscription is the regular expression a queue's consumers subscribe
// to: the main topic and every retry topic, including ones created later.
func subscription(queue string) string {
	return `^` + regexp.QuoteMeta(queue) + `(\.retry\.[0-9]+ms)?$`
}

// Transport is the Kafka transport. All methods are safe for concurrent
// use.
type Transport struct {
	opts     Options
	prod     *kgo.Client // producer and admin connection
	adm      *kadm.Client
	attempts AttemptStore

	mu        sync.Mutex
	specs     transport.Specs
	topics    map[string]int32 // known topics and their partition counts
	instances map[instanceKey]*instance
	shares    map[instanceKey]*shareInstance // share-group members
	// shareReady marks share groups whose share.auto.offset.reset was set.
	shareReady map[string]bool
	// shareLimits caches each share group's delivery limit (the broker's
	// archive limit) once checked against its queue's delivery_limit.
	shareLimits map[string]int
	closed      bool
}

// Open creates the transport's producer and checks that a broker answers
// (a metadata request) before ctx ends.
func Open(ctx context.Context, opts Options) (*Transport, error) {
	o := opts.withDefaults()
	t := &Transport{opts: o, topics: map[string]int32{},
		instances: map[instanceKey]*instance{}, shares: map[instanceKey]*shareInstance{},
		shareReady: map[string]bool{}, shareLimits: map[string]int{}}
	cl, err := kgo.NewClient(t.clientOpts(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(pinPartitioner{keyed: kgo.StickyKeyPartitioner(nil)}),
		kgo.RecordDeliveryTimeout(max(o.ProduceTimeout, time.Second)), // franz-go's floor; shorter ones end by context
		kgo.UnknownTopicRetries(2),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client for %v: %w", o.Brokers, err)
	}
	t.prod, t.adm = cl, kadm.NewClient(cl)
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka: no broker answered at %s: %w (point Lily at your cluster with --brokers host:port,...)", strings.Join(o.Brokers, ","), err)
	}
	t.attempts = o.Attempts
	if t.attempts == nil {
		t.attempts = &topicAttempts{t: t}
	}
	return t, nil
}

// clientOpts returns the options every client of the transport shares,
// followed by extra.
func (t *Transport) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(t.opts.Brokers...),
		kgo.ClientID(t.opts.ClientID),
		kgo.WithLogger(kgoLogger{t.opts.Logger}),
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
	opts = append(opts, t.opts.ClientOpts...)
	return append(opts, extra...)
}

// Features describes the transport: the runtime dead-letters at the
// delivery limit from the persisted count; retries wait in retry topics.
func (t *Transport) Features() transport.Features {
	return transport.Features{DelayedRetry: true}
}

// Attempts returns the attempt store in use (Options.Attempts, or the
// compacted topic store).
func (t *Transport) Attempts() AttemptStore { return t.attempts }

// Client returns the transport's producer client, for administration
// (e.g. kadm.NewClient) and tests.
func (t *Transport) Client() *kgo.Client { return t.prod }

// Close closes every consumer (committing what was settled) and the
// producer. Deliveries not settled are redelivered by the group.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	insts := make([]*instance, 0, len(t.instances))
	for _, c := range t.instances {
		insts = append(insts, c)
	}
	t.instances = map[instanceKey]*instance{}
	shares := make([]*shareInstance, 0, len(t.shares))
	for _, s := range t.shares {
		shares = append(shares, s)
	}
	t.shares = map[instanceKey]*shareInstance{}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), t.opts.ProduceTimeout)
	defer cancel()
	for _, s := range shares {
		s.stop(true)
	}
	for _, c := range insts {
		c.stop(ctx, true)
	}
	t.prod.Close()
	return nil
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// group returns the consumer group of queue.
func (t *Transport) group(queue string) string { return t.opts.Group(queue) }

// register remembers queue specs: their buckets name the retry topics.
func (t *Transport) register(specs ...transport.QueueSpec) {
	t.specs.Register(specs...)
}

// Register tells the transport about queues whose topics were created
// elsewhere (lily topology apply), without touching the cluster.
func (t *Transport) Register(specs ...transport.QueueSpec) { t.register(specs...) }

func (t *Transport) spec(queue string) (transport.QueueSpec, bool) {
	s, ok := t.specs.Lookup(queue)
	return s, ok
}

// partitions returns the partition count of topic, asking the cluster
// once; a topic that does not exist is ErrUnknownQueue.
func (t *Transport) partitions(ctx context.Context, topic string) (int32, error) {
	t.mu.Lock()
	n, ok := t.topics[topic]
	t.mu.Unlock()
	if ok {
		return n, nil
	}
	td, err := t.adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka: describe topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("kafka: topic %q does not exist (declare it with lily topology apply): %w", topic, transport.ErrUnknownQueue)
	}
	n = int32(len(d.Partitions))
	t.mu.Lock()
	t.topics[topic] = n
	t.mu.Unlock()
	return n, nil
}

// forget drops cached topic metadata (after deletes).
func (t *Transport) forget(topics ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tp := range topics {
		delete(t.topics, tp)
	}
}

// produce produces records with acks=all and waits for every one; it
// returns one error per record (nil when the broker confirmed it).
func (t *Transport) produce(ctx context.Context, recs []*kgo.Record) []error {
	errs := make([]error, len(recs))
	if len(recs) == 0 {
		return errs
	}
	pctx, cancel := context.WithTimeout(ctx, t.opts.ProduceTimeout)
	defer cancel()
	for _, r := range recs {
		if r.Context == nil {
			r.Context = pctx
		} else {
			r.Context = mergeCtx(r.Context, pctx)
		}
	}
	var wg sync.WaitGroup
	wg.Add(len(recs))
	for i, r := range recs {
		t.prod.Produce(pctx, r, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("kafka: produce to %s (acks=all): %w", recs[i].Topic, err)
		}
	}
	return errs
}

// pinKey marks a record's context with the partition it must go to.
type pinKey struct{}

type pinned struct {
	context.Context
	part int32
}

// Value returns the pinned partition for pinKey.
func (p pinned) Value(k any) any {
	if k == (pinKey{}) {
		return p.part
	}
	return p.Context.Value(k)
}

// pin makes r go to partition part of its topic (modulo the topic's
// partition count).
func pin(r *kgo.Record, part int32) {
	ctx := r.Context
	if ctx == nil {
		ctx = context.Background()
	}
	r.Context = pinned{Context: ctx, part: part}
}

// mergeCtx keeps a's values (the pin) with b's deadline and cancellation.
func mergeCtx(a, b context.Context) context.Context {
	if p, ok := a.(pinned); ok {
		return pinned{Context: b, part: p.part}
	}
	return b
}

// pinPartitioner sends pinned records to their partition, keyed records by
// the Java client's murmur2 hash (so that Lily and other producers agree),
// and others round robin.
type pinPartitioner struct{ keyed kgo.Partitioner }

// ForTopic implements kgo.Partitioner.
func (p pinPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{keyed: p.keyed.ForTopic(topic)}
}

type topicPartitioner struct {
	keyed kgo.TopicPartitioner
	mu    sync.Mutex
	next  int
}

// RequiresConsistency implements kgo.TopicPartitioner: a record's partition
// never changes once chosen.
func (p *topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

// Partition implements kgo.TopicPartitioner.
func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Context != nil {
		if v, ok := r.Context.Value(pinKey{}).(int32); ok && v >= 0 {
			return int(v) % n
		}
	}
	if r.Key != nil {
		return p.keyed.Partition(r, n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = (p.next + 1) % n
	return p.next
}

// kgoLogger forwards franz-go's log to slog, at the most verbose level
// the slog logger has enabled (warnings at least).
type kgoLogger struct{ l *slog.Logger }

// Level implements kgo.Logger.
func (k kgoLogger) Level() kgo.LogLevel {
	switch ctx := context.Background(); {
	case k.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case k.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

// Log implements kgo.Logger.
func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error("kafka: "+msg, keyvals...)
	case kgo.LogLevelWarn:
		k.l.Warn("kafka: "+msg, keyvals...)
	case kgo.LogLevelInfo:
		k.l.Info("kafka: "+msg, keyvals...)
	default:
		k.l.Debug("kafka: "+msg, keyvals...)
	}
}

// errClosed wraps transport.ErrClosed.
var errClosed = fmt.Errorf("kafka: %w", transport.ErrClosed)

// isCtxErr reports whether err is a context cancellation or deadline.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
