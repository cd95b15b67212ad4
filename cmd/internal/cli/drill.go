package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/drill"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

func init() { register(newDrillCmd) }

// drillFlags are the flags of 'lily drill'.
type drillFlags struct {
	sf      storeFlags
	queue   string
	url     string
	brokers string
	actor   string
	asJSON  bool
	o       drill.Options
}

func newDrillCmd() *cobra.Command {
	var f drillFlags
	cmd := &cobra.Command{
		Use:   "drill --config FILE --queue Q",
		Short: "Rehearse a queue's dead-letter path on a real environment: dead letter, catalog, alert, console, redrive, ledger",
		Long: `Publish one synthetic poison message, marked as a drill (x-lily-drill), to a
queue of the configuration and check every step of its dead-letter path, each
with its time (docs/drill.md):

  publish        the drill message is published to the queue
  dead_lettered  a consumer dead-letters it with reason invalid_retry_count
                 (its x-retry-count is the string "drill": every Lily consumer
                 dead-letters it before any handler runs)
  catalog        its dead letter is an entry of the catalog (on a broker,
                 through the ingest of 'lily serve')
  alert          the queue's alert (--alert, default LilyDLQNotEmpty) fires in
                 Prometheus (--prometheus) or Alertmanager (--alertmanager);
                 with neither it is reported "not_checked", never passed
  console        the API of 'lily serve' (--console URL) shows its reason
  dlq_show       'lily dlq show ID' shows its reason
  redrive        it is redriven and acked by the consumers' drill path (the
                 runtime acks a redriven drill message without the handler);
                 with --finish discard: discard, with a record, for consumers
                 that cannot recognise a drill message
  ledger         nothing is left behind: the message acked or discarded, no
                 entry of it held, and the queue's ledger balances

It then prints a runbook skeleton with the queue's real names. The exit code is
0 when no step failed, 1 when one did (--json prints the same report as JSON,
for CI). Queues with ordering = "park" or "block" are refused unless
--allow-ordered: the drill's dead letter would hold its key.`,
		Example: `  lily drill --config lily.toml --queue orders.created --prometheus http://127.0.0.1:9090 --console http://127.0.0.1:8080
  lily drill --config lily.toml --queue orders.created --alertmanager http://am:9093 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDrill(cmd, f) },
	}
	f.sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "the [[queue]] of --config to drill (required)")
	urlFlag(fl, &f.url, "")
	brokersFlag(fl, &f.brokers)
	actorFlag(cmd, &f.actor)
	jsonFlag(fl, &f.asJSON, "print the report as JSON (steps with name, status, duration_ms and detail; docs/drill.md)")
	fl.StringVar(&f.o.Prometheus, "prometheus", "", "base URL of the Prometheus server that evaluates the rules of 'lily alerts', e.g. http://127.0.0.1:9090")
	fl.StringVar(&f.o.Alertmanager, "alertmanager", "", "base URL of the Alertmanager the alerts go to, e.g. http://127.0.0.1:9093 (instead of --prometheus)")
	fl.StringVar(&f.o.Alert, "alert", drill.DefaultAlert, "the alert to wait for (its label queue is the drilled queue)")
	fl.StringVar(&f.o.Console, "console", "", "base URL of 'lily serve' (its API and console), e.g. http://127.0.0.1:8080")
	// The environment is read at run time, never as the flag's default:
	// --help would print the token.
	fl.StringVar(&f.o.Token, "console-token", "", "API token for --console, if 'lily serve' has tokens (default: $LILY_CONSOLE_TOKEN)")
	fl.StringVar(&f.o.Finish, "finish", drill.FinishRedrive, "what becomes of the drill's dead letter: redrive (the consumers' drill path acks it) or discard (with a record; for consumers that cannot recognise a drill message)")
	fl.BoolVar(&f.o.AllowOrdered, "allow-ordered", false, "drill a queue with ordering park or block (the drill's dead letter holds its key until the drill redrives or discards it)")
	fl.DurationVar(&f.o.Timeout, "timeout", time.Minute, "how long to wait for the dead letter to reach the catalog")
	fl.DurationVar(&f.o.AlertTimeout, "alert-timeout", 5*time.Minute, "how long to wait for the alert to fire (a scrape, a rule evaluation and its for:)")
	fl.DurationVar(&f.o.AckTimeout, "ack-timeout", time.Minute, "how long to wait for a consumer to ack the redriven drill message")
	return cmd
}

func (f drillFlags) validate() error {
	switch {
	case f.sf.config == "":
		return usagef("drill: --config FILE is required: the drilled queue is one of its [[queue]] entries")
	case f.queue == "":
		return usagef("drill: --queue Q is required: the [[queue]] of --config %s to drill", f.sf.config)
	case f.o.Prometheus != "" && f.o.Alertmanager != "":
		return usagef("--prometheus %s and --alertmanager %s: give one (where the alert is asked)", f.o.Prometheus, f.o.Alertmanager)
	case f.o.Finish != drill.FinishRedrive && f.o.Finish != drill.FinishDiscard:
		return usagef("--finish %q: must be %s or %s", f.o.Finish, drill.FinishRedrive, drill.FinishDiscard)
	}
	for name, d := range map[string]time.Duration{"--timeout": f.o.Timeout, "--alert-timeout": f.o.AlertTimeout, "--ack-timeout": f.o.AckTimeout} {
		if d <= 0 {
			return usagef("%s %s: must be > 0, e.g. 1m", name, d)
		}
	}
	return nil
}

func runDrill(cmd *cobra.Command, f drillFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	ctx := cmd.Context()
	// The queue is checked before anything is opened: a refusal touches
	// nothing.
	cfg, err := f.sf.loadConfig()
	if err != nil {
		return err
	}
	q, ok := cfg.Queue(f.queue)
	if !ok {
		return usagef("--queue %s: not a [[queue]] of --config %s (its queues: %s)", f.queue, f.sf.config, strings.Join(configuredQueues(cfg), ", "))
	}
	f.o.Actor = actorOr(f.actor)
	if f.o.Token == "" {
		f.o.Token = os.Getenv("LILY_CONSOLE_TOKEN")
	}
	if err := drill.Check(q, f.o); err != nil {
		return &UsageError{Msg: err.Error()}
	}
	env, err := openDLQ(ctx, f.sf)
	if err != nil {
		return err
	}
	defer env.Close()
	targets := &redriveTargets{env: env, url: f.url, brokers: f.brokers}
	defer targets.Close()
	denv := drill.Env{Queue: q, Catalog: env.cat, Ledger: env.ledger, Target: targets.target, Tick: targets.ingest,
		Show: drillShow(ctx, f.sf), Names: drillNames(env, q, f.sf.config)}
	if brokers.IsBroker(q.Transport) {
		if denv.Publisher, err = targets.broker(ctx, q); err != nil {
			return err
		}
	} else {
		if env.sq == nil {
			return usagef("--queue %s: a SQLite queue, and the catalog %s is not its SQLite store: give --db (or the config's db) instead of a PostgreSQL catalog", q.Name, env.path)
		}
		qs, err := env.sq.Queues(ctx)
		if err != nil {
			return err
		}
		if !slices.Contains(qs, q.Name) {
			return fmt.Errorf("queue %s is not declared in the SQLite store %s: no consumer of it ever ran there (start 'lily consume --queue %s' or your service first)",
				q.Name, env.path, q.Name)
		}
		denv.Publisher = env.sq
	}
	brk, err := targets.open()
	if err != nil {
		return err
	}
	counters, err := brk.Counters(ctx, sqliteCounter(env.sq))
	if err != nil {
		return err
	}
	denv.InFlight = counters
	rep, err := drill.Run(ctx, denv, f.o)
	if err != nil {
		return err
	}
	if f.asJSON {
		err = report.JSON(cmd.OutOrStdout(), rep)
	} else {
		err = printDrill(cmd.OutOrStdout(), rep)
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		var failed []string
		for _, s := range rep.Steps {
			if s.Status == drill.Failed {
				failed = append(failed, s.Name)
			}
		}
		return &ExitError{Code: 1, Msg: fmt.Sprintf("drill of %s failed at: %s", q.Name, strings.Join(failed, ", "))}
	}
	return nil
}

// configuredQueues names the [[queue]] entries of cfg.
func configuredQueues(cfg config.Config) []string {
	var names []string
	for _, q := range cfg.Queues {
		names = append(names, q.Name)
	}
	return names
}

// drillShow runs 'lily dlq show ID' on the same store, as an operator
// would, and returns what it prints.
func drillShow(ctx context.Context, sf storeFlags) func(context.Context, int64) (string, error) {
	return func(_ context.Context, id int64) (string, error) {
		args := []string{"dlq", "show", strconv.FormatInt(id, 10), "--config", sf.config}
		if sf.db != "" {
			args = append(args, "--db", sf.db)
		}
		if sf.catalog != "" {
			args = append(args, "--catalog", sf.catalog)
		}
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			return "", fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errb.String()))
		}
		return out.String(), nil
	}
}

// drillNames are q's real names for the runbook.
func drillNames(env *dlqEnv, q lily.QueueConfig, config string) drill.Names {
	n := drill.Names{Config: config}
	for _, r := range queueRules(q, alertOptions{config: config, spikeFactor: 3, spikeMin: 10, breakerFor: 15 * time.Minute,
		keyHeldFor: 10 * time.Minute, brokerFor: 5 * time.Minute, outboxAge: 5 * time.Minute, outbox: env.cfg.OutboxURL != ""}) {
		n.Alerts = append(n.Alerts, r.Alert)
	}
	switch q.Transport {
	case lily.TransportSQLite:
		n.DeadLetter = []string{fmt.Sprintf("straight into the catalog of %s, in the consumer's own transaction", env.path)}
		n.Retry = []string{fmt.Sprintf("retry copies wait in the queue's rows of %s until due (visible_at)", env.path)}
	case lily.TransportRabbitMQ:
		top, err := rabbitmq.Plan([]transport.QueueSpec{q.Spec()})
		if err != nil {
			n.Retry = []string{"see lily topology plan --config " + config}
			break
		}
		for _, x := range top.Queues {
			switch x.Role {
			case "retry":
				n.Retry = append(n.Retry, "bucket "+x.Name)
			case "dlq":
				n.DeadLetter = append(n.DeadLetter, fmt.Sprintf("RabbitMQ queue %s (via exchange %s), then into the catalog by the ingest of 'lily serve'",
					x.Name, rabbitmq.DeadLetterExchange(q.Exchange)))
			}
		}
		if len(n.Retry) > 0 {
			n.Retry = append(n.Retry, "exchange "+rabbitmq.RetryExchange(q.Exchange))
		}
	default:
		n.DeadLetter = []string{fmt.Sprintf("the %s dead-letter destination of %s (lily topology plan --config %s), then into the catalog by the ingest of 'lily serve'",
			q.Transport, q.Name, config)}
		n.Retry = []string{"lily topology plan --config " + config}
	}
	return n
}

// printDrill writes the report for people.
func printDrill(w io.Writer, rep *drill.Report) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "drill %s of %s (%s): event %s", rep.Drill, rep.Queue, rep.Transport, rep.EventID)
	if rep.EntryID > 0 {
		fmt.Fprintf(&b, ", catalog entry %d", rep.EntryID)
	}
	b.WriteString("\n")
	for _, s := range rep.Steps {
		fmt.Fprintf(&b, "  %-13s %-11s %8s  %s\n", s.Name, s.Status, (time.Duration(s.DurationMillis) * time.Millisecond).String(), s.Detail)
	}
	if rep.LeftBehind != "" {
		fmt.Fprintf(&b, "left behind: %s\n", rep.LeftBehind)
	}
	var unchecked []string
	for _, s := range rep.Steps {
		if s.Status == drill.NotChecked {
			unchecked = append(unchecked, s.Name)
		}
	}
	verdict := "drill passed"
	if !rep.Passed {
		verdict = "drill FAILED"
	}
	if len(unchecked) > 0 {
		verdict += fmt.Sprintf("; %d steps NOT checked: %s", len(unchecked), strings.Join(unchecked, ", "))
	}
	b.WriteString(verdict + "\n")
	b.WriteString("\n")
	b.WriteString(rep.Runbook)
	_, err := w.Write(b.Bytes())
	return err
}
