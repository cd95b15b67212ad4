package azqueue

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

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

// Limits of Azure Storage queues that Lily designs for.
const (
	// MaxVisibility is the service's longest visibility timeout (7 days):
	// the longest lease and the longest retry delay.
	MaxVisibility = 7 * 24 * time.Hour
	// MaxMessageSize is the service's limit on one message's text (64 KiB).
	MaxMessageSize = 64 * 1024
	// MaxBatch is the most messages one Get Messages call returns.
	MaxBatch = 32
	// DefaultVisibilityTimeout is the lease of Options.VisibilityTimeout.
	DefaultVisibilityTimeout = 30 * time.Second
	// DefaultPollInterval is Options.PollInterval's default.
	DefaultPollInterval = 500 * time.Millisecond
)

// Azurite's well-known development account (published by Microsoft for
// the emulator; it opens nothing on Azure), and the queue endpoint of an
// Azurite started with its defaults.
const (
	AzuriteURL     = "http://127.0.0.1:10001/" + DevAccountName
	DevAccountName = "devstoreaccount1"
	DevAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Options configure a Transport.
type Options struct {
	// ServiceURL is the queue service endpoint: "https://<account>.queue.core.windows.net/"
	// on Azure, "http://127.0.0.1:10001/devstoreaccount1" on Azurite.
	// Required unless ConnectionString is set.
	ServiceURL string
	// AccountName and AccountKey are the shared-key credential. Both empty
	// with Credential nil: no credential (a SAS in ServiceURL).
	AccountName, AccountKey string
	// Credential is an Entra ID token credential (azidentity), used when
	// AccountKey is empty.
	Credential azcore.TokenCredential
	// ConnectionString, when set, replaces ServiceURL and the credential.
	ConnectionString string
	// VisibilityTimeout is the lease of a received message; the runtime
	// extends it while the handler runs. Whole seconds, 1s..7 days.
	// Defaults to 30s.
	VisibilityTimeout time.Duration
	// PollInterval is the pause between two Get Messages calls of a
	// Receive that found nothing (the service has no long polling; each
	// call is a billed transaction). Defaults to 500ms.
	PollInterval time.Duration
	// Concurrency is how many service calls Publish and Settle run at
	// once. Defaults to 8.
	Concurrency int
	// Logger receives the transport's warnings. Defaults to discarding.
	Logger *slog.Logger
}

// Transport is the Azure Storage queue transport. It is safe for
// concurrent use.
type Transport struct {
	opts    Options
	service *azqueue.ServiceClient
	specs   transport.Specs

	mu      sync.Mutex
	clients map[string]*azqueue.QueueClient
	held    map[string]map[*receipt]bool // consumer -> receipts
	stash   transport.Stash
	wary    map[string]bool
	closed  bool

	httpTransport *http.Transport // our connection pool, closed by Close
}

// Open returns a transport for the options. It does not contact the service.
func Open(o Options) (*Transport, error) {
	if o.VisibilityTimeout == 0 {
		o.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if o.VisibilityTimeout < time.Second || o.VisibilityTimeout > MaxVisibility || o.VisibilityTimeout%time.Second != 0 {
		return nil, fmt.Errorf("azqueue: VisibilityTimeout %s: must be whole seconds between 1s and 168h (the service's range)", o.VisibilityTimeout)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// Our own connection pool, whose idle connections Close closes.
	own := http.DefaultTransport.(*http.Transport).Clone()
	own.MaxIdleConnsPerHost = 64
	copts := &azqueue.ClientOptions{ClientOptions: policy.ClientOptions{Transport: &http.Client{Transport: own},
		Retry: policy.RetryOptions{MaxRetries: 3, TryTimeout: 30 * time.Second}}}
	var (
		svc *azqueue.ServiceClient
		err error
	)
	switch {
	case o.ConnectionString != "":
		svc, err = azqueue.NewServiceClientFromConnectionString(o.ConnectionString, copts)
	case o.ServiceURL == "":
		return nil, errors.New("azqueue: no service URL: set azqueue_url in the config (e.g. https://<account>.queue.core.windows.net/, or http://127.0.0.1:10001/devstoreaccount1 for Azurite)")
	case o.AccountKey != "":
		var cred *azqueue.SharedKeyCredential
		if cred, err = azqueue.NewSharedKeyCredential(o.AccountName, o.AccountKey); err != nil {
			return nil, fmt.Errorf("azqueue: account key of %q: %w", o.AccountName, err)
		}
		svc, err = azqueue.NewServiceClientWithSharedKeyCredential(o.ServiceURL, cred, copts)
	case o.Credential != nil:
		svc, err = azqueue.NewServiceClient(o.ServiceURL, o.Credential, copts)
	default:
		svc, err = azqueue.NewServiceClientWithNoCredential(o.ServiceURL, copts)
	}
	if err != nil {
		return nil, fmt.Errorf("azqueue: client for %s: %w", o.ServiceURL, err)
	}
	return &Transport{opts: o, service: svc, clients: map[string]*azqueue.QueueClient{}, httpTransport: own,
		held: map[string]map[*receipt]bool{}, wary: map[string]bool{}}, nil
}

// Service returns the service client, for tools that need calls Lily does
// not wrap.
func (t *Transport) Service() *azqueue.ServiceClient { return t.service }

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
	t.httpTransport.CloseIdleConnections()
	return nil
}

func (t *Transport) checkOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("azqueue: %w", transport.ErrClosed)
	}
	return nil
}

// client returns the client of a Storage queue (by its Storage name).
func (t *Transport) client(name string) (*azqueue.QueueClient, error) {
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.clients[name]
	if !ok {
		c = t.service.NewQueueClient(name)
		t.clients[name] = c
	}
	return c, nil
}

// Suffixes of the queues Lily and Azure Functions put beside a queue.
const (
	dlqSuffix    = "-dlq"
	poisonSuffix = "-poison"
)

// storageName maps a Lily queue name to a Storage queue name, with suffix
// appended: lower case, every character other than a letter, a digit or
// '-' (the dots of "orders.created") becomes '-', runs of '-' become one,
// and a name longer than the service's 63 characters keeps its head and
// ends in 8 hex digits of a hash of the whole Lily name (two long names
// never meet).
func storageName(queue, suffix string) string {
	var b strings.Builder
	dash := true // no leading '-'
	for _, r := range strings.ToLower(queue) {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	base := strings.TrimRight(b.String(), "-")
	if len(base)+len(suffix) > 63 {
		h := fnv.New32a()
		h.Write([]byte(queue))
		base = strings.TrimRight(base[:63-len(suffix)-9], "-") + fmt.Sprintf("-%08x", h.Sum32())
	}
	return base + suffix
}

// QueueName is the Storage name of a Lily queue ("orders.created" →
// "orders-created").
func QueueName(queue string) string { return storageName(queue, "") }

// DeadLetterQueue is the Storage name of Lily's DLQ of queue:
// "<queue's Storage name>-dlq".
func DeadLetterQueue(queue string) string { return storageName(queue, dlqSuffix) }

// PoisonQueue is the Storage name of the poison queue Azure Functions
// moves a queue's failed messages to: "<queue's Storage name>-poison".
func PoisonQueue(queue string) string { return storageName(queue, poisonSuffix) }

// CheckQueueName returns an error naming the queue when its Storage name
// is not one the service accepts (at least 3 characters).
func CheckQueueName(queue string) error {
	if n := QueueName(queue); len(n) < 3 {
		return fmt.Errorf("azqueue: queue %q: Storage name %q is shorter than 3 characters: Storage queue names are 3 to 63 lower-case letters, digits and '-'; rename the queue", queue, n)
	}
	return nil
}

// seconds rounds d up to whole seconds (a delay is never shortened).
func seconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32((d + time.Second - 1) / time.Second)
}

// errorCode is the service's error code of err ("" when none).
func errorCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// isLeaseLost reports whether the service refused a pop receipt: the
// message was received again by someone else, or is gone.
func isLeaseLost(err error) bool {
	return queueerror.HasCode(err, queueerror.MessageNotFound, queueerror.PopReceiptMismatch)
}

// isNotFound reports whether the service says the queue does not exist.
func isNotFound(err error) bool { return queueerror.HasCode(err, queueerror.QueueNotFound) }

// isTooLarge reports the service's refusal of a message over its size limit.
func isTooLarge(err error) bool {
	return queueerror.HasCode(err, queueerror.RequestBodyTooLarge, queueerror.MessageTooLarge)
}

// unknown wraps a queue-not-found error of queue (Storage name name).
func unknown(op, queue, name string, err error) error {
	return fmt.Errorf("azqueue: %s %s (Storage name %s): %w: create it with 'lily topology apply': %w", op, queue, name, transport.ErrUnknownQueue, err)
}

// parallelEach runs f(0..n-1) on up to Concurrency goroutines and returns
// each one's error.
func (t *Transport) parallelEach(n int, f func(i int) error) []error {
	return transport.RunEach(n, t.opts.Concurrency, f)
}

// enqueue adds a message text to a Storage queue, visible after delay,
// never expiring (a Lily message is never dropped by the service).
func (t *Transport) enqueue(ctx context.Context, queue, name, text string, delay time.Duration) error {
	if delay > MaxVisibility {
		return fmt.Errorf("delay %s on queue %s exceeds the service's visibility limit of %s: lower the queue's retry delays (max_retry_backoff_millis ≤ 604800000)", delay, queue, MaxVisibility)
	}
	c, err := t.client(name)
	if err != nil {
		return err
	}
	ttl := int32(-1)
	o := &azqueue.EnqueueMessageOptions{TimeToLive: &ttl}
	if s := seconds(delay); s > 0 {
		o.VisibilityTimeout = &s
	}
	if _, err := c.EnqueueMessage(ctx, text, o); err != nil {
		if isNotFound(err) {
			return unknown("enqueue to", queue, name, err)
		}
		return fmt.Errorf("azqueue: enqueue to %s (Storage name %s): %w", queue, name, err)
	}
	return nil
}
