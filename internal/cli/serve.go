package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/lilyprom"
)

func init() { register(newServeCmd) }

// defaultListen is where 'lily serve' listens unless told otherwise.
const defaultListen = "127.0.0.1:8080"

func newServeCmd() *cobra.Command {
	var (
		sf     storeFlags
		listen string
		url    string
		kbrk   string
	)
	cmd := &cobra.Command{
		Use:   "serve (--config FILE | --db PATH) [--listen 127.0.0.1:8080]",
		Short: "Serve the web console, the JSON API, /metrics and /healthz over the catalog",
		Long: `Serve the dead-letter work list over HTTP until interrupted:

  /              the web console: queues, groups, entries with their evidence,
                 redrive (dry run, then sample and rest at a rate), discard,
                 the audit log
  /api/...       the JSON API, mirroring 'lily dlq' (/api/openapi.json)
  /metrics       Prometheus metrics (lily_dlq_entries, ...; see lilyprom)
  /healthz       "ok", or "degraded" with the reasons when a dead-letter queue
                 holds entries or is past its deadline (still HTTP 200)

Access: named tokens with a role — viewer (read; bodies masked unless
show_bodies), operator (also redrive, discard, unpark), admin (also erase,
expire) — from the config's [[token]] entries (secret or secret_env) and
the LILY_TOKENS environment variable ("name:role:secret,..."). API clients
send "Authorization: Bearer SECRET"; the console logs in with the secret
once. Every decision is audited under the token's name, and so is every
request refused for its role.

Without any token the server runs in local mode: every request acts as
"local" with the admin role, so it listens on a loopback address only
(--listen 0.0.0.0:8080 is refused until tokens are configured).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, sf, listen, url, kbrk) },
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&listen, "listen", defaultListen, "address to listen on, host:port")
	cmd.Flags().StringVar(&url, "url", "", "AMQP URL of the broker (default: the config's rabbitmq_url)")
	brokersFlag(cmd, &kbrk)
	return cmd
}

func runServe(cmd *cobra.Command, sf storeFlags, listen, url, brokersArg string) error {
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return usagef("--listen %q: want host:port, e.g. --listen 127.0.0.1:8080", listen)
	}
	cfg, err := sf.loadConfig()
	if err != nil {
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
	ctx := cmd.Context()
	env, err := openDLQ(ctx, sf)
	if err != nil {
		return err
	}
	defer env.Close()
	targets := &redriveTargets{env: env, url: url, brokers: brokersArg}
	defer targets.Close()
	counters, closeAll, err := ledgerCounters(ctx, env.sq, env.cfg, url, brokersArg)
	defer closeAll()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		return err
	}
	var names []string
	for _, q := range env.cfg.Queues {
		names = append(names, q.Name)
	}
	reg.MustRegister(lilyprom.NewCatalogCollector(env.cat, counters, lilyprom.CatalogOptions{Queues: names}))
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	srv, err := httpapi.New(httpapi.Options{Store: env.cat, Config: env.cfg, Tokens: tokens, Target: targets.target,
		Tick: targets.ingest, InFlight: counters, Metrics: lilyprom.Handler(reg), Redrives: hook, Logger: logger})
	if err != nil {
		return err
	}
	defer srv.Close()
	defer startJobRunner(ctx, env, targets, hook, logger)()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("serve: --listen %s: %w", listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	mode := fmt.Sprintf("%d token(s)", len(tokens))
	if len(tokens) == 0 {
		mode = "local mode: no tokens, every request acts as \"local\" (admin)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "lily serve: console and API on http://%s/ (%s; catalog %s)\n", ln.Addr(), mode, env.path)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "lily serve: stopped")
	return nil
}
