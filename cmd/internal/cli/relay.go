package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

func init() { register(newRelayCmd) }

// relayJSON is what 'lily relay --once --json' prints.
type relayJSON struct {
	Outbox    string `json:"outbox"`
	Published int    `json:"published"`
	Failed    int    `json:"failed"`
	Pending   int64  `json:"pending"`
}

func newRelayCmd() *cobra.Command {
	var (
		cfgPath, outboxURL string
		once, asJSON       bool
		batch              int
		poll               time.Duration
		metricsAddr        string
	)
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish an application's outbox (package outbox) to the configured queues",
		Long: `Publish the rows that transactions wrote with outbox.Add to their queues,
through the queue's transport (sqlite, rabbitmq or kafka, as configured), and
mark each row published only after the transport confirmed it. At-least-once:
a crash between the confirm and the mark publishes the row again, with the same
event ID (the consumer's inbox absorbs it). A key's next row is not published
before the previous one is confirmed. A failed publish is retried with the
relay's own backoff; it never touches x-retry-count.

The outbox lives in the application's database: --outbox (or outbox_url in the
configuration), a PostgreSQL URL or a SQLite file. On PostgreSQL any number of
relays may run at once; on SQLite run one per file.

Runs until interrupted; --once relays what is due until nothing is left that
can be published now, then exits (non-zero if rows failed).

--metrics ADDR serves Prometheus metrics at http://ADDR/metrics while it runs:
lily_outbox_published_total, lily_outbox_publish_failures_total and
lily_outbox_relay_errors_total (this relay's), and, read from the outbox at every
scrape, lily_outbox_pending, lily_outbox_failing and
lily_outbox_oldest_pending_age_seconds per queue (see 'lily alerts':
LilyOutboxStalled).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.LoadConfig(cfgPath)
			if err != nil {
				return err
			}
			if outboxURL == "" {
				outboxURL = cfg.OutboxURL
			}
			if outboxURL == "" {
				return usagef("relay: no outbox: pass --outbox URL (a PostgreSQL URL or a SQLite file) or set outbox_url in %s", cfgPath)
			}
			ctx := cmd.Context()
			db, err := openOutboxDB(ctx, outboxURL)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := outbox.Migrate(ctx, db); err != nil {
				return err
			}
			pub, err := newQueueRouter(cfg)
			if err != nil {
				return err
			}
			defer pub.Close()
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			ro := outbox.RelayOptions{Batch: batch, Poll: poll, Logger: logger}
			if metricsAddr != "" {
				if once {
					return usagef("relay: --metrics goes with a running relay, not with --once (nothing would be there to scrape)")
				}
				stop, err := serveRelayMetrics(cmd, metricsAddr, db, cfg, &ro, logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			r, err := outbox.NewRelay(db, pub, ro)
			if err != nil {
				return err
			}
			if !once {
				return r.Run(ctx)
			}
			out := relayJSON{Outbox: report.RedactedURL(outboxURL)}
			for {
				res, err := r.RunOnce(ctx)
				if err != nil {
					return err
				}
				out.Published += res.Published
				out.Failed += res.Failed
				if res.Published == 0 {
					break
				}
			}
			if out.Pending, err = r.Pending(ctx); err != nil {
				return err
			}
			if asJSON {
				if err := report.JSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "relayed %d rows from %s; %d failed (retried later), %d pending\n",
					out.Published, out.Outbox, out.Failed, out.Pending)
			}
			if out.Failed > 0 {
				return &ExitError{Code: 1, Msg: fmt.Sprintf("relay: %d rows were not confirmed; they stay in the outbox and are retried", out.Failed)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	configFlag(fl, &cfgPath, "lily.toml", "configuration file: the queues and their transports")
	fl.StringVar(&outboxURL, "outbox", "", "the application database holding the outbox: a PostgreSQL URL or a SQLite file (default: outbox_url of the configuration)")
	fl.BoolVar(&once, "once", false, "relay what is due, then exit")
	jsonFlag(fl, &asJSON, "with --once: print one JSON object")
	fl.IntVar(&batch, "batch", 100, "most rows per round")
	fl.DurationVar(&poll, "poll", 200*time.Millisecond, "wait between rounds when nothing is due")
	fl.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9465)")
	return cmd
}

// serveRelayMetrics serves the relay's metrics on addr: its counters
// (installed as ro.Observer) and the outbox's backlog, read at every
// scrape, for every configured queue. stop shuts the server down.
func serveRelayMetrics(cmd *cobra.Command, addr string, db *sql.DB, cfg config.Config, ro *outbox.RelayOptions, logger *slog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	m, err := lilyprom.NewRelayMetrics(reg)
	if err != nil {
		return nil, err
	}
	var queues []string
	for _, q := range cfg.Queues {
		queues = append(queues, q.Name)
	}
	m.Init(queues...)
	reg.MustRegister(lilyprom.NewOutboxCollector(db, queues, 0))
	ro.Observer = m
	return serveMetrics("lily relay", addr, reg, cmd.OutOrStdout(), logger)
}

// openOutboxDB opens the application database: PostgreSQL by URL, else a
// SQLite file.
func openOutboxDB(ctx context.Context, u string) (*sql.DB, error) {
	if catalog.IsPostgresURL(u) {
		db, err := sql.Open("pgx", u)
		if err != nil {
			return nil, fmt.Errorf("relay: open %s: %w", report.RedactedURL(u), err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("relay: connect to %s: %w", report.RedactedURL(u), err)
		}
		return db, nil
	}
	return sqlitedb.Open(ctx, u, sqlitedb.Options{})
}

// queueRouter publishes each queue's messages through the transport the
// configuration names for it. It only publishes.
type queueRouter struct {
	cfg     config.Config
	brokers *brokers.Set
	mu      sync.Mutex
	store   *sqlite.Transport
}

var _ transport.Transport = (*queueRouter)(nil)

func newQueueRouter(cfg config.Config) (*queueRouter, error) {
	b := brokers.New(cfg, brokers.Options{})
	return &queueRouter{cfg: cfg, brokers: b}, nil
}

func (q *queueRouter) target(ctx context.Context, queue string) (transport.Transport, error) {
	for _, qc := range q.cfg.Queues {
		if qc.Name != queue {
			continue
		}
		if qc.Transport == "" || qc.Transport == lily.TransportSQLite {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.store == nil {
				st, err := sqlite.Open(ctx, q.cfg.DB, sqlite.Options{})
				if err != nil {
					return nil, err
				}
				q.store = st
			}
			return q.store, nil
		}
		return q.brokers.ForQueue(ctx, qc)
	}
	return nil, fmt.Errorf("queue %q is not in the configuration: add a [[queue]] for it, or fix the outbox row's queue: %w", queue, transport.ErrUnknownQueue)
}

// Publish implements transport.Transport.
func (q *queueRouter) Publish(ctx context.Context, p *transport.PublishParams) error {
	t, err := q.target(ctx, p.Queue)
	if err != nil {
		return err
	}
	return t.Publish(ctx, p)
}

var errRelayOnly = errors.New("relay: the relay's router only publishes")

// Receive implements transport.Transport; the router does not receive.
func (q *queueRouter) Receive(context.Context, *transport.ReceiveParams) ([]*transport.Delivery, error) {
	return nil, errRelayOnly
}

// Settle implements transport.Transport; the router does not settle.
func (q *queueRouter) Settle(context.Context, *transport.SettleParams) error { return errRelayOnly }

// Close closes the transports opened.
func (q *queueRouter) Close() error {
	q.brokers.Close()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.store != nil {
		return q.store.Close()
	}
	return nil
}
