package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/idle"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/presence"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/redrive/rules"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

func init() { register(newConsumeCmd) }

// consumeFlags are the flags of 'lily consume'.
type consumeFlags struct {
	store               storeFlags
	queue               string
	httpURL, execCmd    string
	concurrency         int
	prefetch            int
	url, brokers        string
	name, version       string
	instance            string
	exitWhenIdle        time.Duration
	verbose, asJSON     bool
	httpResponseMaxBody int64
	metricsAddr         string
}

// consumeJSON is the --json summary 'lily consume' prints when it stops.
type consumeJSON struct {
	Queue        string `json:"queue"`
	Transport    string `json:"transport"`
	Handler      string `json:"handler"`
	Acked        int64  `json:"acked"`
	Retried      int64  `json:"retried"`
	DeadLettered int64  `json:"dead_lettered"`
	Released     int64  `json:"released"`
	Faults       int64  `json:"faults"`
}

func newConsumeCmd() *cobra.Command {
	var f consumeFlags
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Run Lily's consumer runtime for a handler written in any language: an HTTP endpoint or a command",
		Long: `Run the consumer runtime as a sidecar: Lily receives from the configured
queue (SQLite, RabbitMQ or Kafka), counts deliveries, retries through the
delay buckets, dead-letters with evidence and keeps the ledger; the handler
is an HTTP endpoint (--http URL) or a command (--exec CMD, run by /bin/sh -c
once per delivery).

HTTP: each delivery is a POST of the original body to URL, with
  Content-Type            the message's content type header, else application/octet-stream
  Lily-Event-Id           the event ID
  Lily-Queue              the queue
  Lily-Delivery-Count     1-based broker-side delivery count of this copy
  Lily-Retry-Count        framework retries so far (x-retry-count)
  Lily-Redrive-Count      operator redrives so far
  Lily-Key, Lily-Type     the message key and type (when set)
  Lily-Schema-Version     x-lily-schema-version (when set)
  Lily-Headers            the message's headers as one JSON object
The answer:
  2xx                     ack
  422                     permanent: dead-letter at once (reason permanent)
  any other status        transient: retried, then dead-lettered (retries_exhausted)
  a JSON body {"outcome": "ack"|"permanent"|"transient", "error": "..."} (Content-Type
  application/json) decides instead of the status; a JSON body that does not decode is transient
  connection refused, a timeout (handler_timeout_millis), a malformed answer: transient
  connection reset or closed without an answer: the handler crashed (see below)
The error text (the JSON "error", else the status and the start of the body)
becomes the dead letter's evidence, redacted.

Command: the body on stdin; LILY_EVENT_ID, LILY_QUEUE, LILY_DELIVERY_COUNT,
LILY_RETRY_COUNT, LILY_REDRIVE_COUNT, LILY_KEY, LILY_TYPE, LILY_SCHEMA_VERSION
and LILY_HEADERS (JSON) in the environment. Exit code 0 acks, 65 (EX_DATAERR)
is permanent, any other code is transient; the tail of stderr is the error
text. A command still running at handler_timeout_millis is killed with its
whole process group (transient).

A handler that crashes (a command killed by a signal it did not get from
Lily, or whose shell exits 129..192 = 128 + a signal; an endpoint that drops
the connection) is treated like a consumer
process that died: the delivery is released, the broker or store counts it,
and past delivery_limit it is dead-lettered with reason delivery_limit.

Traces: with the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...) each delivery's handler run
is an OpenTelemetry span sent over OTLP/HTTP, a child of the message's
traceparent; the HTTP handler gets the span as its traceparent header.

SIGTERM or SIGINT stops gracefully: no new deliveries, the ones held are
finished and settled. --exit-when-idle stops once nothing is in flight.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runConsume(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f.store.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "the [[queue]] of the config to consume (required)")
	fl.StringVar(&f.httpURL, "http", "", "handler endpoint: each delivery is POSTed to this http:// or https:// URL")
	fl.StringVar(&f.execCmd, "exec", "", "handler command, run by /bin/sh -c once per delivery with the body on stdin")
	fl.IntVar(&f.concurrency, "concurrency", 4, "handlers running at once, 1..1024")
	fl.IntVar(&f.prefetch, "prefetch", 0, "most deliveries held at once (default 16 × --concurrency)")
	urlFlag(fl, &f.url, "")
	brokersFlag(fl, &f.brokers)
	fl.StringVar(&f.name, "name", "lily-consume", "consumer name written in the evidence (x-lily-consumer)")
	fl.StringVar(&f.version, "version", "", "consumer version written in the evidence (x-lily-consumer-version), e.g. the handler's build")
	fl.StringVar(&f.instance, "instance", "", "consumer instance ID (default <host>-<pid>-<random>)")
	fl.DurationVar(&f.exitWhenIdle, "exit-when-idle", 0, "stop gracefully once the queue has had nothing in flight for this long, at least twice its longest retry delay (0: run until SIGTERM)")
	fl.Int64Var(&f.httpResponseMaxBody, "http-max-answer", 64<<10, "bytes of an HTTP answer read at most")
	fl.StringVar(&f.metricsAddr, "metrics", "", "serve the runtime's Prometheus metrics (lily_messages_total, lily_retries_at_ack, ...) at http://ADDR/metrics, e.g. 127.0.0.1:9466")
	fl.BoolVar(&f.verbose, "verbose", false, "log the runtime's decisions to stderr")
	jsonFlag(fl, &f.asJSON, "print the counts as one JSON object when stopping")
	return cmd
}

func (f consumeFlags) validate() error {
	var errs []error
	if f.store.config == "" {
		errs = append(errs, errors.New("--config is required: the file whose [[queue]] names the queue, its transport and its retry settings"))
	}
	if f.queue == "" {
		errs = append(errs, errors.New("--queue is required: the [[queue]] name to consume"))
	}
	switch {
	case f.httpURL == "" && f.execCmd == "":
		errs = append(errs, errors.New("pass --http URL or --exec CMD: the handler"))
	case f.httpURL != "" && f.execCmd != "":
		errs = append(errs, errors.New("--http and --exec: pass one handler"))
	case f.httpURL != "" && !strings.HasPrefix(f.httpURL, "http://") && !strings.HasPrefix(f.httpURL, "https://"):
		errs = append(errs, fmt.Errorf("--http %q: want an http:// or https:// URL, e.g. http://127.0.0.1:8000/orders", f.httpURL))
	}
	if f.concurrency < 1 || f.concurrency > 1024 {
		errs = append(errs, fmt.Errorf("--concurrency %d: must be in 1..1024", f.concurrency))
	}
	if f.prefetch < 0 {
		errs = append(errs, fmt.Errorf("--prefetch %d: must be >= 0 (0: 16 × --concurrency)", f.prefetch))
	}
	if f.exitWhenIdle < 0 {
		errs = append(errs, fmt.Errorf("--exit-when-idle %s: must be >= 0", f.exitWhenIdle))
	}
	if f.httpResponseMaxBody < 1 {
		errs = append(errs, fmt.Errorf("--http-max-answer %d: must be >= 1", f.httpResponseMaxBody))
	}
	if len(errs) > 0 {
		return &UsageError{Msg: "consume: " + errors.Join(errs...).Error()}
	}
	return nil
}

// consumeBackend is the transport a sidecar consumes through, and what
// the ledger needs of it.
type consumeBackend struct {
	tr      transport.Transport
	cat     *catalog.Store
	counter transport.InFlightCounter
	// presence is the SQLite store's heartbeat (a broker's is its
	// ledger.Accounted); nil otherwise.
	presence transport.Presence
	closeFn  []func()
}

func (b *consumeBackend) Close() {
	for i := len(b.closeFn) - 1; i >= 0; i-- {
		b.closeFn[i]()
	}
}

// openConsumeBackend opens q's transport as 'lily serve' and the demo do:
// the SQLite store with its own catalog, or the broker wrapped in the
// catalog's ledger (ledger.Account), so that every message received is
// counted accepted and every settlement is counted.
func openConsumeBackend(ctx context.Context, f consumeFlags, cfg config.Config, q lily.QueueConfig) (*consumeBackend, error) {
	b := &consumeBackend{}
	if q.Transport == lily.TransportSQLite {
		path := f.store.db
		if path == "" {
			path = cfg.DB
		}
		tr, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			return nil, err
		}
		b.closeFn = append(b.closeFn, func() { tr.Close() })
		if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
			b.Close()
			return nil, err
		}
		cat, err := catalog.New(ctx, tr.DB())
		if err != nil {
			b.Close()
			return nil, err
		}
		// The SQLite store counts its own ledger (no ledger.Accounted):
		// the heartbeats and pauses come from a Beat of their own.
		beat := presence.New(cat, presence.Options{})
		b.closeFn = append(b.closeFn, func() { beat.Close() })
		b.tr, b.cat, b.counter, b.presence = tr, cat, tr, beat
		return b, nil
	}
	cat, err := f.store.openCatalog(ctx)
	if err != nil {
		return nil, err
	}
	b.closeFn = append(b.closeFn, func() { cat.Close() })
	brk, err := openBrokers(cfg, f.url, f.brokers)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.closeFn = append(b.closeFn, brk.Close)
	bt, err := brk.ForQueue(ctx, q)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.tr, b.cat, b.counter = ledger.Account(bt, ledger.New(cat)), cat, bt
	return b, nil
}

func runConsume(ctx context.Context, f consumeFlags, stdout, stderr io.Writer) error {
	if err := f.validate(); err != nil {
		return err
	}
	cfg, err := f.store.loadConfig()
	if err != nil {
		return err
	}
	q, ok := cfg.Queue(f.queue)
	if !ok {
		return usagef("--queue %s: no [[queue]] with that name in %s (add one, or pick one of its queues)", f.queue, f.store.config)
	}
	red, err := evidence.NewRedactor(cfg.RedactPatterns...)
	if err != nil {
		return err
	}
	var h lily.Handler
	desc := ""
	if f.httpURL != "" {
		h, desc = newHTTPHandler(f.httpURL, f.httpResponseMaxBody), "http "+report.RedactedURL(f.httpURL)
	} else {
		h, desc = newExecHandler(f.execCmd), "exec "+f.execCmd
	}
	b, err := openConsumeBackend(ctx, f, cfg, q)
	if err != nil {
		return err
	}
	defer b.Close()
	var logOut io.Writer = io.Discard
	level := slog.LevelWarn
	if f.verbose {
		logOut, level = stderr, slog.LevelDebug
	}
	counts := &consumeCounts{}
	prefetch := f.prefetch
	if prefetch == 0 {
		prefetch = 16 * f.concurrency
	}
	opts := lily.ConsumerOptions{
		Queue: q, Concurrency: f.concurrency, Prefetch: prefetch, Instance: f.instance,
		Name: f.name, Version: f.version, Redactor: red, ReceiveWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		Hooks:  []lily.Hook{counts}, Presence: b.presence,
	}
	if b.cat != nil {
		// Rule-driven redrive ([[redrive_rule]]) reads the breaker's
		// transitions and the acking consumer versions from the catalog.
		opts.Hooks = append(opts.Hooks, rules.NewRuntimeRecorder(b.cat, rules.RecorderParams{
			Consumer: cmp.Or(f.name, "lily-consume") + "@" + cmp.Or(f.instance, catalog.LeaseHolder()), Version: f.version, Logger: opts.Logger}))
	}
	if q.Ordering == lily.OrderingPark || q.Ordering == lily.OrderingBlock {
		opts.Keys = redrive.NewKeys(b.cat)
	}
	tp, stopTraces, err := tracerFromEnv(ctx, "lily consume", cmp.Or(f.name, "lily-consume"), stderr)
	if err != nil {
		return err
	}
	defer stopTraces()
	opts.TracerProvider = tp
	if f.metricsAddr != "" {
		hook, stopMetrics, err := serveConsumeMetrics(f.metricsAddr, q.Name, stderr, opts.Logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
		opts.Hooks = append(opts.Hooks, hook)
	}
	c, err := lily.NewConsumer(b.tr, h, opts)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if f.exitWhenIdle > 0 {
		go idle.StopWhenIdle(runCtx, cancel, b.counter, q, f.exitWhenIdle)
	}
	if !f.asJSON {
		fmt.Fprintf(stderr, "lily consume: queue %s (%s) → %s, concurrency %d\n", q.Name, q.Transport, desc, f.concurrency)
	}
	runErr := c.Run(runCtx)
	out := counts.json(q, desc)
	if f.asJSON {
		if err := report.JSON(stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "stopped: %d acked, %d retried, %d dead-lettered, %d released, %d faults\n",
			out.Acked, out.Retried, out.DeadLettered, out.Released, out.Faults)
	}
	return runErr
}
