package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/ingest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/redrive"
)

func init() { register(newServeCmd) }

// defaultListen is where 'lily serve' listens unless told otherwise.
const defaultListen = "127.0.0.1:8080"

// serveOptions are the flags of 'lily serve'.
type serveOptions struct {
	sf         storeFlags
	listen     string
	url        string
	kbrk       string
	tlsCert    string
	tlsKey     string
	trustProxy bool
	ingest     ingestOptions
	jobLease   time.Duration
	rulesEvery time.Duration
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve (--config FILE | --db PATH) [--listen 127.0.0.1:8080]",
		Short: "Serve the web console, the JSON API, /metrics and /healthz over the catalog; ingest broker DLQs continuously",
		Long: `Serve the dead-letter work list over HTTP until interrupted:

  /              the web console: queues, groups, entries with their evidence,
                 redrive (dry run, then sample and rest at a rate), discard,
                 the audit log
  /api/...       the JSON API, mirroring 'lily dlq' (/api/openapi.json)
  /metrics       Prometheus metrics (lily_dlq_entries, ...; see lilyprom)
  /healthz       "ok", or "degraded" with the reasons when a dead-letter queue
                 holds entries or is past its deadline (still HTTP 200)

Continuous ingest: every --ingest-interval (default 5s) the server drains the
broker DLQ of every [[queue]] on RabbitMQ (<queue>.dlq.v2) or Kafka (its
dead-letter topic) into the catalog, as 'lily dlq ingest' does (catalog
commit, then broker ack), so that a dead letter the broker made by itself is
in the catalog, lily_dlq_inflow_total and the alerts within seconds. Several
replicas may serve one catalog: a lease per queue in the catalog
(lily_leases, "ingest/<queue>") lets exactly one drain each queue at a time;
every batch renews it in the batch's transaction. A replica that stops
releases its leases; one that dies hands over when they expire
(--ingest-lease-ttl, default 30s). The log says which replica took which
lease and what it drained; /metrics exports lily_ingest_total,
lily_ingest_errors_total, lily_ingest_lease_held and
lily_ingest_last_success_timestamp_seconds per queue, and
lily_broker_dlq_messages: what is still in the broker (alert
LilyBrokerDLQNotIngested of 'lily alerts'). --no-ingest turns the loop off
(the gauge stays).

Traces: with the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_SERVICE_NAME, ...) every message a redrive sends — from the API or a
redrive job — is an OpenTelemetry "redrive <queue>" span sent over
OTLP/HTTP, in the message's own trace (linked to a span it runs under);
the consumer's attempt after the redrive is its child.

Access: named tokens with a role — viewer (read; bodies masked unless
show_bodies), operator (also redrive, discard, unpark), admin (also erase,
expire) — from the config's [[token]] entries (secret or secret_env) and
the LILY_TOKENS environment variable ("name:role:secret,..."). API clients
send "Authorization: Bearer SECRET"; the console logs in with the secret
once. Every decision is audited under the token's name, and so is every
request refused for its role.

Without any token the server runs in local mode: every request acts as
"local" with the admin role, so it listens on a loopback address only
(--listen 0.0.0.0:8080 is refused until tokens are configured).

TLS: --tls-cert FILE --tls-key FILE (PEM) serve HTTPS; the session cookie is
then Secure. Behind a TLS-terminating proxy, --trust-proxy marks the cookie
Secure for requests the proxy forwards with X-Forwarded-Proto: https (set it
only when every request comes through that proxy). Listening on a
non-loopback address without --tls-cert logs a warning: tokens and session
cookies would cross the network in clear text.`,
		Example: `  lily serve --config lily.toml --listen 127.0.0.1:8080
  lily serve --config lily.toml --listen 0.0.0.0:8443 --tls-cert /etc/lily/cert.pem --tls-key /etc/lily/key.pem
  lily serve --config lily.toml --ingest-interval 2s --ingest-lease-ttl 20s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, o) },
	}
	o.sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&o.listen, "listen", defaultListen, "address to listen on, host:port")
	urlFlag(fl, &o.url, "")
	brokersFlag(fl, &o.kbrk)
	fl.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file; needs --tls-key")
	fl.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fl.BoolVar(&o.trustProxy, "trust-proxy", false, "trust X-Forwarded-Proto from a TLS-terminating proxy: \"https\" marks the session cookie Secure")
	fl.BoolVar(&o.ingest.off, "no-ingest", false, "do not drain the broker DLQs continuously (the default drains them every --ingest-interval)")
	fl.DurationVar(&o.ingest.interval, "ingest-interval", ingest.DefaultInterval, "how often each broker DLQ is drained into the catalog")
	fl.DurationVar(&o.ingest.leaseTTL, "ingest-lease-ttl", ingest.DefaultLeaseTTL,
		"how long a replica's ingest lease of a queue lasts unrenewed: after it dies, another replica takes over within this (>= 2x --ingest-interval)")
	fl.DurationVar(&o.jobLease, "job-lease", redrive.DefaultJobLease,
		"how long a redrive job's runner lease lasts unrenewed: after a replica dies mid-job, another resumes the job within this (>= 1s)")
	fl.DurationVar(&o.rulesEvery, "rules-interval", defaultRulesInterval, "how often the [[redrive_rule]] triggers are checked (dlq_rules.go)")
	return cmd
}

// tlsConfig loads --tls-cert and --tls-key; nil without them.
func (o serveOptions) tlsConfig() (*tls.Config, error) {
	if o.tlsCert == "" && o.tlsKey == "" {
		return nil, nil
	}
	if o.tlsCert == "" || o.tlsKey == "" {
		return nil, usagef("--tls-cert and --tls-key go together: give both PEM files (certificate and its private key), or neither for plain HTTP")
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("serve: --tls-cert %s --tls-key %s: %w (both PEM: the certificate chain and its unencrypted private key)", o.tlsCert, o.tlsKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func runServe(cmd *cobra.Command, o serveOptions) error {
	sf, listen, url, brokersArg := o.sf, o.listen, o.url, o.kbrk
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return usagef("--listen %q: want host:port, e.g. --listen 127.0.0.1:8080", listen)
	}
	if err := o.ingest.validate(); err != nil {
		return err
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return err
	}
	cfg, err := sf.loadConfig()
	if err != nil {
		return err
	}
	if err := useIndexRedactor(cfg); err != nil { // dlq_search.go
		return err
	}
	tokens, err := httpapi.TokensFromConfig(cfg, os.Getenv)
	if err != nil {
		return fmt.Errorf("serve: tokens: %w", err)
	}
	if len(tokens) == 0 && !httpapi.LoopbackAddr(listen) {
		return usagef("--listen %s: refused: no token is configured, so anyone who reaches this address would act as admin "+
			"(redrive, discard, erase). Add [[token]] entries (name, role, secret_env) to --config or set %s=\"name:role:secret,...\", "+
			"or listen on a loopback address such as --listen 127.0.0.1:8080", listen, httpapi.TokensEnv)
	}
	if o.rulesEvery <= 0 {
		return usagef("--rules-interval %s: must be > 0 (default %s)", o.rulesEvery, defaultRulesInterval)
	}
	if o.jobLease < time.Second {
		return usagef("--job-lease %s: must be at least 1s (default %s): a runner renews its lease before every batch", o.jobLease, redrive.DefaultJobLease)
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	if tlsCfg == nil && !httpapi.LoopbackAddr(listen) {
		logger.Warn(plainNetworkWarning, "listen", listen)
	}
	ctx := cmd.Context()
	env, err := openDLQ(ctx, sf)
	if err != nil {
		return err
	}
	defer env.Close()
	targets := &redriveTargets{env: env, url: url, brokers: brokersArg}
	defer targets.Close()
	counters, closeAll, err := ledgerCounters(ctx, sqliteCounter(env.sq), env.cfg, url, brokersArg)
	defer closeAll()
	if err != nil {
		return err
	}
	tp, stopTraces, err := tracerFromEnv(ctx, "lily serve", "lily-serve", cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stopTraces()
	env.useTracer(tp) // the ingest's catalog writes and the API's decisions
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		return err
	}
	var names, brokerQueues []string
	retention := map[string]time.Duration{}
	for _, q := range env.cfg.Queues {
		names = append(names, q.Name)
		retention[q.Name] = time.Duration(q.Settings().DLQRetentionHours) * time.Hour
		if brokers.IsBroker(q.Transport) {
			brokerQueues = append(brokerQueues, q.Name)
		}
	}
	reg.MustRegister(lilyprom.NewCatalogCollector(env.cat, counters, lilyprom.CatalogOptions{Queues: names, Retention: retention}))
	if len(brokerQueues) > 0 {
		reg.MustRegister(lilyprom.NewBrokerDLQCollector(counters, brokerQueues, 0))
	}
	loop, closeLoop, err := newIngestLoop(ctx, o, env, reg, hook, logger)
	defer closeLoop()
	if err != nil {
		return err
	}
	srv, err := httpapi.New(httpapi.Options{Store: env.cat, Config: env.cfg, Tokens: tokens, Target: targets.target,
		Tick: targets.ingest, InFlight: counters, Metrics: lilyprom.Handler(reg), Redrives: hook, Logger: logger,
		SecureCookies: tlsCfg != nil, TrustProxy: o.trustProxy, JobLease: o.jobLease, TracerProvider: tp})
	if err != nil {
		return err
	}
	defer srv.Close()
	defer startJobRunner(ctx, env, targets, hook, logger, o.jobLease, tp)()
	defer startRuleLoop(ctx, env.cat, catalogRules(env.cfg), o.rulesEvery, logger, tp)()
	// The ledger's per-event rows past ledger_horizon_hours are folded
	// away in the background (every replica may; each row goes once).
	pruneCtx, stopPrune := context.WithCancel(ctx)
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		_ = env.ledger.RunPruner(pruneCtx, ledger.DefaultPruneInterval, logger)
	}()
	defer func() { stopPrune(); <-pruned }()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("serve: --listen %s: %w", listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		TLSConfig: tlsCfg}
	mode := fmt.Sprintf("%d token(s)", len(tokens))
	if len(tokens) == 0 {
		mode = "local mode: no tokens, every request acts as \"local\" (admin)"
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "lily serve: console and API on %s://%s/ (%s; catalog %s)\n", scheme, ln.Addr(), mode, env.path)
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	loopDone := make(chan struct{})
	if loop != nil {
		fmt.Fprintln(cmd.OutOrStdout(), "lily serve:", loop)
		go func() {
			defer close(loopDone)
			loop.Run(loopCtx)
		}()
	} else {
		close(loopDone)
	}
	errc := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			errc <- hs.ServeTLS(ln, "", "")
			return
		}
		errc <- hs.Serve(ln)
	}()
	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stopLoop()
	<-loopDone // the leases are released
	if serveErr != nil {
		return serveErr
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "lily serve: stopped")
	return nil
}

// plainNetworkWarning is logged for a non-loopback --listen without TLS.
const plainNetworkWarning = "serve: listening on a non-loopback address without TLS: bearer tokens and session cookies cross the network in clear text; " +
	"give --tls-cert and --tls-key, or listen on loopback behind a TLS-terminating proxy (with --trust-proxy)"
