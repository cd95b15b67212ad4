package sqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"

	"github.com/lily-mq/lily/transport"
)

var (
	_ transport.Transport         = (*Transport)(nil)
	_ transport.LeaseExtender     = (*Transport)(nil)
	_ transport.LeaseRecoverer    = (*Transport)(nil)
	_ transport.ConsumerStopper   = (*Transport)(nil)
	_ transport.Declarer          = (*Transport)(nil)
	_ transport.DeadLetterDrainer = (*Transport)(nil)
	_ transport.DeadLetterCounter = (*Transport)(nil)
	_ transport.InFlightCounter   = (*Transport)(nil)
	_ transport.Featurer          = (*Transport)(nil)
)

// Limits of SQS that Lily designs for.
const (
	// MaxDelay is SQS's longest DelaySeconds (15 minutes).
	MaxDelay = 15 * time.Minute
	// MaxAttributes is the most message attributes of one SQS message.
	MaxAttributes = 10
	// MaxVisibility is SQS's longest visibility timeout (12 hours).
	MaxVisibility = 12 * time.Hour
	// DefaultVisibilityTimeout is the lease of Options.VisibilityTimeout.
	DefaultVisibilityTimeout = 30 * time.Second
)

// Options configure a Transport.
type Options struct {
	// Config is the AWS configuration (credentials, region, HTTP client),
	// typically from aws-sdk-go-v2/config's LoadDefaultConfig. Defaults to
	// an empty configuration (set Region and credentials).
	Config aws.Config
	// Region overrides Config.Region when set. Defaults to Config.Region.
	Region string
	// Endpoint is the SQS endpoint URL, e.g. an emulator's
	// "http://127.0.0.1:4100". Defaults to AWS's endpoint for the region.
	Endpoint string
	// ClientOptions are applied to the SQS client, e.g. to select the
	// Query protocol for an emulator that speaks only that. Defaults to none.
	ClientOptions []func(*awssqs.Options)
	// QueryProtocol selects SQS's older Query protocol instead of JSON
	// 1.0, for emulators that speak only that (goaws). Defaults to false.
	QueryProtocol bool
	// QueueURLs maps a Lily queue name to its SQS queue URL (and
	// "<queue>-dlq" to its DLQ's), for queues that are not found by name
	// (other account). Defaults to looking queues up with GetQueueUrl.
	QueueURLs map[string]string
	// VisibilityTimeout is the lease of a received message; the runtime
	// extends it while the handler runs. Whole seconds, 1s..12h. Defaults
	// to 30s.
	VisibilityTimeout time.Duration
	// MaxWait caps the long-polling wait of one ReceiveMessage (SQS allows
	// up to 20s). Defaults to 20s.
	MaxWait time.Duration
	// PublishConcurrency is how many SendMessage calls Publish runs at
	// once. Defaults to 8.
	PublishConcurrency int
	// Logger receives the transport's warnings. Defaults to discarding.
	Logger *slog.Logger
}

// Transport is the SQS transport. It is safe for concurrent use.
type Transport struct {
	opts   Options
	client *awssqs.Client
	specs  transport.Specs

	mu     sync.Mutex
	urls   map[string]string
	held   map[string]map[string]*receipt // consumer -> receipt handle -> receipt
	stash  transport.Stash
	wary   map[string]bool // consumer saw a redelivery: receive one at a time
	closed bool

	httpTransport *http.Transport // nil when the caller gave the HTTP client
}

// Open returns a transport for the options. It does not contact SQS.
func Open(o Options) (*Transport, error) {
	if o.VisibilityTimeout == 0 {
		o.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if o.VisibilityTimeout < time.Second || o.VisibilityTimeout > MaxVisibility || o.VisibilityTimeout%time.Second != 0 {
		return nil, fmt.Errorf("sqs: VisibilityTimeout %s: must be whole seconds between 1s and 12h (SQS's range)", o.VisibilityTimeout)
	}
	if o.MaxWait <= 0 || o.MaxWait > 20*time.Second {
		o.MaxWait = 20 * time.Second
	}
	if o.PublishConcurrency <= 0 {
		o.PublishConcurrency = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg := o.Config.Copy()
	if o.Region != "" {
		cfg.Region = o.Region
	}
	if cfg.Region == "" {
		return nil, errors.New("sqs: no region: set sqs_region in the config (or AWS_REGION)")
	}
	var own *http.Transport
	if cfg.HTTPClient == nil {
		// Our own connection pool, closed by Close.
		own = http.DefaultTransport.(*http.Transport).Clone()
		own.MaxIdleConnsPerHost = 64
		cfg.HTTPClient = &http.Client{Transport: own}
	}
	opts := append([]func(*awssqs.Options){}, o.ClientOptions...)
	if o.QueryProtocol {
		opts = append(opts, func(so *awssqs.Options) { so.Protocol = awsquery.New(schemas.AmazonSQS) })
	}
	if o.Endpoint != "" {
		opts = append([]func(*awssqs.Options){func(so *awssqs.Options) { so.BaseEndpoint = aws.String(o.Endpoint) }}, opts...)
	}
	t := &Transport{opts: o, client: awssqs.NewFromConfig(cfg, opts...), urls: map[string]string{}, httpTransport: own,
		held: map[string]map[string]*receipt{}, wary: map[string]bool{}}
	for k, v := range o.QueueURLs {
		t.urls[k] = v
	}
	return t, nil
}

// Client returns the SQS client, for tools that need calls Lily does not
// wrap.
func (t *Transport) Client() *awssqs.Client { return t.client }

// Features describes the transport: leases (visibility timeouts) and
// delayed retry; Lily dead-letters at the delivery limit itself.
func (t *Transport) Features() transport.Features {
	return transport.Features{DelayedRetry: true, Leases: true, VisibilityTimeout: t.opts.VisibilityTimeout}
}

// Close marks the transport closed; later calls return transport.ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.httpTransport != nil {
		t.httpTransport.CloseIdleConnections()
	}
	return nil
}

func (t *Transport) checkOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("sqs: %w", transport.ErrClosed)
	}
	return nil
}

// DeadLetterQueue is the name of Lily's DLQ of queue: "<queue>-dlq" (for a
// FIFO queue "<base>-dlq.fifo": an SQS FIFO queue's DLQ must be FIFO too).
func DeadLetterQueue(queue string) string {
	if base, ok := strings.CutSuffix(queue, ".fifo"); ok {
		return base + "-dlq.fifo"
	}
	return queue + "-dlq"
}

// IsFIFO reports whether queue is an SQS FIFO queue (its name ends in ".fifo").
func IsFIFO(queue string) bool { return strings.HasSuffix(queue, ".fifo") }

// sqsName is what SQS accepts: alphanumerics, hyphens and underscores,
// 1..80 characters, ".fifo" at the end of a FIFO queue's name.
var sqsName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,75}(\.fifo)?$`)

// QueueName maps a Lily queue name to its SQS name: SQS names allow no
// dots, so each '.' (but a FIFO queue's ".fifo") becomes '-'
// ("orders.created" → "orders-created").
func QueueName(queue string) string {
	base, fifo := strings.CutSuffix(queue, ".fifo")
	name := strings.ReplaceAll(base, ".", "-")
	if fifo {
		name += ".fifo"
	}
	return name
}

// CheckQueueName returns an error naming the queue when its SQS name (and
// its DLQ's) is not one SQS accepts.
func CheckQueueName(queue string) error {
	for _, n := range []string{QueueName(queue), QueueName(DeadLetterQueue(queue))} {
		if len(n) > 80 || !sqsName.MatchString(n) {
			return fmt.Errorf("sqs: queue %q: SQS name %q is not valid: at most 80 characters (DLQ suffix \"-dlq\" included) of letters, digits, '-' and '_' (dots become '-'), plus \".fifo\" for a FIFO queue", queue, n)
		}
	}
	return nil
}

// queueURL returns the SQS URL of a Lily queue name (or a DLQ name), by
// Options.QueueURLs or GetQueueUrl, cached.
func (t *Transport) queueURL(ctx context.Context, queue string) (string, error) {
	if err := t.checkOpen(); err != nil {
		return "", err
	}
	t.mu.Lock()
	u, ok := t.urls[queue]
	t.mu.Unlock()
	if ok {
		return u, nil
	}
	out, err := t.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(QueueName(queue))})
	if err != nil {
		var nf *types.QueueDoesNotExist
		if errors.As(err, &nf) || strings.Contains(err.Error(), "NonExistentQueue") || strings.Contains(err.Error(), "QueueNotFound") {
			return "", fmt.Errorf("sqs: queue %s (SQS name %s): %w: create it with 'lily topology apply'", queue, QueueName(queue), transport.ErrUnknownQueue)
		}
		return "", fmt.Errorf("sqs: get URL of queue %s: %w", queue, err)
	}
	u = aws.ToString(out.QueueUrl)
	t.mu.Lock()
	t.urls[queue] = u
	t.mu.Unlock()
	return u, nil
}

// forget drops a cached queue URL (the queue was deleted).
func (t *Transport) forget(queue string) {
	t.mu.Lock()
	delete(t.urls, queue)
	t.mu.Unlock()
}

// seconds rounds d up to whole seconds (a delay is never shortened).
func seconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32((d + time.Second - 1) / time.Second)
}

// QueueURL returns the SQS URL of a Lily queue name (or a DLQ name).
func (t *Transport) QueueURL(ctx context.Context, queue string) (string, error) {
	return t.queueURL(ctx, queue)
}
