package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
)

func init() { register(newDemoCmd) }

// demoJSON is the --json output of 'lily demo'.
type demoJSON struct {
	DB string `json:"db"`
	// Catalog is the PostgreSQL catalog of --catalog (password hidden);
	// DB is then empty.
	Catalog   string `json:"catalog,omitempty"`
	Transport string `json:"transport"`
	// ShareGroup is the Kafka share group that consumed the queue
	// (--share-group); empty on a consumer group.
	ShareGroup          string           `json:"share_group,omitempty"`
	Queue               string           `json:"queue"`
	Messages            int              `json:"messages"`
	Accepted            int64            `json:"accepted"`
	Acked               int64            `json:"acked"`
	DeadLettered        int64            `json:"dead_lettered"`
	Discarded           int64            `json:"discarded"`
	InFlight            int64            `json:"in_flight"`
	Lost                int64            `json:"lost"`
	DeadLettersByReason map[string]int64 `json:"dead_letters_by_reason"`
	WorkerRestarts      int              `json:"worker_restarts"`
	// Redriven, RedriveRounds and NeedsManual describe the second half:
	// entries redriven after the fix, the redrive rounds that sent any
	// (the sample, then the rest), entries left for a manual decision.
	Redriven       int   `json:"redriven"`
	RedriveRounds  int   `json:"redrive_rounds"`
	NeedsManual    int64 `json:"needs_manual"`
	DurationMillis int64 `json:"duration_ms"`
	// ShopDB is the shop's database, where the order consumer records
	// each order through the inbox (package inbox).
	ShopDB string `json:"shop_db,omitempty"`
	// EffectsApplied is how many orders the shop recorded, and
	// EffectsDistinct how many different event IDs among them: equal when
	// every effect was applied exactly once.
	EffectsApplied  int64 `json:"effects_applied"`
	EffectsDistinct int64 `json:"effects_distinct"`
	// DuplicatesAbsorbed is how many deliveries the inbox found already
	// applied (a redelivery after a crash between commit and ack, a
	// redrive of an order already recorded) and acked without effect.
	DuplicatesAbsorbed int64 `json:"duplicates_absorbed"`
	// EffectsExactlyOnce: every recorded order has a distinct event ID.
	EffectsExactlyOnce bool `json:"effects_exactly_once"`
}

type demoFlags struct {
	db, transport, url, brokers, queue   string
	shareGroup                           string // Kafka share group (--share-group, demo_share.go); "" for a consumer group
	catalog                              string // PostgreSQL catalog URL (--catalog)
	messages, malformed, flaky, hopeless int
	crashing, maxRestarts                int
	seed                                 uint64
	asJSON, verbose                      bool
	noRedrive                            bool
	fixed                                bool   // the worker runs the fixed handler
	shopDB                               string // the shop's database (demo_inbox.go); "" for none
	scenario                             string
	rate                                 float64
	outage                               time.Duration
	breaker                              bool
}

func newDemoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an order consumer with poison messages on the embedded store and prove nothing was lost",
		Long: `Run Lily's main job on the embedded SQLite store, with no service to start.

The demo creates queue orders.created in a SQLite file, publishes a workload of
orders, and consumes it with a worker running as a child process — restarted
whenever it dies, as a supervisor would — until nothing is left in flight. Then
it prints the ledger and the dead letters grouped by reason, and reconciles.

The workload's trouble makers:
  malformed  body that does not decode              → dead-lettered: permanent
  flaky      payment gateway times out 1-2 times    → retried, then acked
  hopeless   inventory service never knows the SKU  → dead-lettered: retries_exhausted
  crashing   gift note kills the worker process     → dead-lettered: delivery_limit
             (caught by the delivery count, not by a catch block)

Then the second half (skip it with --no-redrive): the bugs are fixed — the
worker now knows retired SKUs and renders gift notes safely — and the dead
letters are worked through as an operator would: the malformed orders, which
no deploy can fix, are discarded with a reason; a dry run shows the plan; a
sample of 2 is redriven and watched; the rest is redriven at 200/s; the fixed
worker runs until the queue is quiet. Every decision is in 'lily audit', and
the reconcile at the end still finds every message acked or discarded with a
record: lost = 0.

The order consumer records each order in a shop database (<db>-shop.db)
through the inbox (package inbox), in one transaction with its inbox mark; the
gift-note renderer crashes after that commit, before the ack. Every crash and
the redrive bring duplicates, which the inbox absorbs: each order is recorded
exactly once (effects_applied, duplicates_absorbed in --json).

With --transport rabbitmq (--url) or kafka (--brokers) the queue lives on a
broker and the catalog in the SQLite file. On Kafka without --brokers the demo
starts an in-process Kafka (kfake) that its worker processes reach over TCP;
the crashing orders are counted by the attempt counter topic. With
--share-group NAME the Kafka queue is consumed by share group NAME instead: the
broker counts the deliveries, delivery_limit is 4 (below the broker's default
group.share.delivery.count.limit of 5, past which it would archive a crashing
order silently), and the counts are the same.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validateShareGroup(); err != nil { // every scenario
				return usagef("demo: %v", err)
			}
			switch f.scenario {
			case "poison":
				return runDemo(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
			case "outage":
				return runOutageDemo(cmd.Context(), f, cmd.OutOrStdout())
			case "ordering":
				return runOrderingDemo(cmd.Context(), f, cmd.OutOrStdout())
			}
			return usagef("--scenario %q: must be poison (the default), outage or ordering", f.scenario)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.db, "db", "", "SQLite file to create for the demo: the store, or the catalog with --transport rabbitmq (default: a new file in a temporary directory)")
	fl.StringVar(&f.catalog, "catalog", "", "PostgreSQL catalog URL for the dead letters and the ledger, with --transport rabbitmq or kafka (instead of --db); the catalog must not know the demo's queue yet")
	fl.StringVar(&f.transport, "transport", lily.TransportSQLite, "where the queue lives: sqlite (embedded, no service), rabbitmq, kafka, sqs (an in-process SQS emulator, or --url https://sqs.<region>.amazonaws.com) or pubsub (an in-process Pub/Sub fake)")
	fl.StringVar(&f.url, "url", config.DefaultRabbitMQURL, "AMQP URL of the broker, with --transport rabbitmq; SQS endpoint (http(s)://...) with --transport sqs")
	fl.StringVar(&f.brokers, "brokers", "", "Kafka seed brokers host:port,..., with --transport kafka (default: an in-process Kafka, kfake)")
	fl.StringVar(&f.shareGroup, "share-group", "", "with --transport kafka: consume the queue through this Kafka share group (KIP-932; Kafka 4.1+), not a consumer group")
	fl.StringVar(&f.queue, "queue", demoQueue, "name of the demo's queue (its exchange is the part before the first dot)")
	fl.IntVar(&f.messages, "messages", 1000, "orders to publish in all")
	fl.IntVar(&f.malformed, "malformed", 10, "orders whose body does not decode")
	fl.IntVar(&f.flaky, "flaky", 50, "orders that fail transiently and succeed on their 2nd or 3rd attempt")
	fl.IntVar(&f.hopeless, "hopeless", 5, "orders that always fail transiently")
	fl.IntVar(&f.crashing, "crashing", 3, "orders that kill the worker process")
	fl.IntVar(&f.maxRestarts, "max-restarts", 100, "give up after this many worker restarts")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the workload's shuffle and order data")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	fl.BoolVar(&f.verbose, "verbose", false, "show the worker's log on stderr")
	fl.BoolVar(&f.noRedrive, "no-redrive", false, "stop after the first half: leave the dead letters in the work list")
	fl.StringVar(&f.scenario, "scenario", "poison", "poison (the workload above), outage (healthy traffic against a dependency that is down longer than the retry span) or ordering (per-account order kept with ordering = \"park\" while one account's posting fails)")
	fl.Float64Var(&f.rate, "rate", 100, "with --scenario outage: messages per second")
	fl.DurationVar(&f.outage, "outage", 4*time.Second, "with --scenario outage: how long the dependency is down")
	fl.BoolVar(&f.breaker, "breaker", true, "with --scenario outage: use the circuit breaker (--breaker=false to see the outage dead-letter healthy messages)")
	return cmd
}

// conn says where the demo's queue lives.
func (f demoFlags) conn() demoConn {
	return demoConn{kind: f.transport, url: f.url, brokers: f.brokers}
}

func (f demoFlags) validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		v    int
	}{{"--messages", f.messages}, {"--malformed", f.malformed}, {"--flaky", f.flaky}, {"--hopeless", f.hopeless}, {"--crashing", f.crashing}} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must be >= 0", c.flag, c.v))
		}
	}
	switch f.transport {
	case lily.TransportSQLite, lily.TransportRabbitMQ, lily.TransportKafka, lily.TransportSQS, lily.TransportPubSub:
	default:
		errs = append(errs, fmt.Errorf("--transport %q: must be sqlite, rabbitmq, kafka, sqs or pubsub", f.transport))
	}
	if f.catalog != "" {
		switch {
		case f.db != "":
			errs = append(errs, fmt.Errorf("--db %s and --catalog: pass one (--catalog for a PostgreSQL catalog, --db for a SQLite file)", f.db))
		case !catalog.IsPostgresURL(f.catalog):
			errs = append(errs, fmt.Errorf("--catalog %q: want a PostgreSQL URL such as postgres://postgres@127.0.0.1:5432/test", f.catalog))
		case f.transport == lily.TransportSQLite:
			errs = append(errs, errors.New("--catalog with --transport sqlite: the embedded transport keeps its dead letters in its own SQLite file (a dead-lettering there is one transaction); use --transport rabbitmq or kafka with --catalog"))
		case f.scenario != "" && f.scenario != "poison":
			errs = append(errs, fmt.Errorf("--catalog with --scenario %s: only the poison scenario runs on a PostgreSQL catalog", f.scenario))
		}
	}
	if sum := f.malformed + f.flaky + f.hopeless + f.crashing; sum > f.messages {
		errs = append(errs, fmt.Errorf("--malformed + --flaky + --hopeless + --crashing = %d: must be <= --messages (%d)", sum, f.messages))
	}
	if err := f.validateShareGroup(); err != nil {
		errs = append(errs, err)
	}
	if dl := demoShareQueueConfig(f.queue, f.transport, f.shareGroup).Settings().DeliveryLimit; f.maxRestarts < f.crashing*dl {
		errs = append(errs, fmt.Errorf("--max-restarts %d: must be >= --crashing × delivery_limit (%d)", f.maxRestarts, f.crashing*dl))
	}
	if len(errs) > 0 {
		return &UsageError{Msg: "demo: " + errors.Join(errs...).Error()}
	}
	return nil
}

func runDemo(ctx context.Context, f demoFlags, stdout, stderr io.Writer) error {
	if err := f.validate(); err != nil {
		return err
	}
	start := time.Now()
	path := f.db
	if f.catalog != "" {
		path = f.catalog // the backend opens the catalog there; the worker too
	} else if path == "" {
		dir, err := os.MkdirTemp("", "lily-demo-")
		if err != nil {
			return err
		}
		path = filepath.Join(dir, "lily.db")
	} else if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return usagef("--db %s: the file exists; the demo creates a new database (choose a new path or remove it)", path)
	}
	f.db = path
	shop, err := demoShopPath(f)
	if err != nil {
		return err
	}
	f.shopDB = shop
	say := func(format string, args ...any) {
		if !f.asJSON {
			fmt.Fprintf(stdout, format+"\n", args...)
		}
	}
	qc := demoShareQueueConfig(f.queue, f.transport, f.shareGroup)
	if err := qc.Validate(); err != nil {
		return usagef("--queue %q: %v", f.queue, err)
	}
	b, err := openDemoBackend(ctx, f.conn(), path, qc)
	if err != nil {
		return err
	}
	defer b.Close()
	if f.catalog != "" {
		if err := demoCatalogFresh(ctx, b.cat, qc.Name); err != nil {
			return err
		}
	}
	if err := b.declare(ctx); err != nil {
		return err
	}
	msgs, _ := demoWorkload(f.messages, f.malformed, f.flaky, f.hopeless, f.crashing, f.seed)
	for i := 0; i < len(msgs); i += 500 {
		if err := lily.Publish(ctx, b.tr, qc.Name, msgs[i:min(i+500, len(msgs))]); err != nil {
			return err
		}
	}
	where := "the embedded SQLite store (" + path + ")"
	switch f.transport {
	case lily.TransportRabbitMQ:
		where = "RabbitMQ (" + redactedURL(f.url) + "), catalog " + path
	case lily.TransportKafka:
		where = b.kafka.where() + shareWhere(f.shareGroup) + ", catalog " + path
	case lily.TransportSQS:
		where = b.sqs.where() + ", catalog " + path
	case lily.TransportPubSub:
		where = b.pubsub.where() + ", catalog " + path
	}
	say("Lily demo: queue %s on %s", qc.Name, where)
	say("published %d orders: %d malformed, %d flaky, %d hopeless, %d crashing; retries %v ms, delivery limit %d",
		f.messages, f.malformed, f.flaky, f.hopeless, f.crashing, qc.Policy().Buckets(), qc.Settings().DeliveryLimit)

	restarts, err := superviseDemo(ctx, b, f, say, stderr)
	if err != nil {
		return err
	}
	if err := b.finish(ctx); err != nil {
		return err
	}
	out := demoJSON{DB: path, Transport: f.transport, ShareGroup: f.shareGroup, Queue: qc.Name, Messages: f.messages, WorkerRestarts: restarts}
	if f.catalog != "" {
		out.DB, out.Catalog = "", redactedURL(f.catalog)
	}
	if err := demoReport(ctx, b, &out, say, stdout, !f.asJSON); err != nil {
		return err
	}
	if !f.noRedrive {
		if out.Lost != 0 || out.InFlight != 0 {
			return &ExitError{Code: 1, Msg: fmt.Sprintf("demo: reconcile after the first half failed: lost %d, in flight %d", out.Lost, out.InFlight)}
		}
		if !f.asJSON {
			say("reconcile: OK — %d accepted = %d acked + %d dead-lettered + %d discarded; lost 0",
				out.Accepted, out.Acked, out.DeadLettered, out.Discarded)
		}
		r, err := demoSecondHalf(ctx, b, f, say, stderr)
		out.WorkerRestarts += r.restarts
		out.Redriven, out.RedriveRounds = r.redriven, r.rounds
		if err != nil {
			return err
		}
		if err := demoReport(ctx, b, &out, say, stdout, false); err != nil {
			return err
		}
		if !f.asJSON {
			say("")
			printLedger(stdout, []ledger.Row{{Queue: out.Queue, Accepted: out.Accepted, Acked: out.Acked,
				DeadLettered: out.DeadLettered, Discarded: out.Discarded, InFlight: out.InFlight, Lost: out.Lost}})
			say("\nredriven %d in %d rounds, %d discarded with a record, %d left for a manual decision; every decision: lily audit %s",
				out.Redriven, out.RedriveRounds, r.discarded, out.NeedsManual, out.storeArg())
		}
	}
	eff, err := readDemoShop(ctx, f.shopDB)
	if err != nil {
		return err
	}
	out.ShopDB, out.EffectsApplied, out.EffectsDistinct, out.DuplicatesAbsorbed = f.shopDB, eff.applied, eff.distinct, eff.duplicates
	out.EffectsExactlyOnce = eff.applied == eff.distinct
	say("inbox: %d orders recorded in %s, each exactly once (%d distinct event IDs); %d duplicate deliveries absorbed (redelivered after a crash between commit and ack, or redriven after they were applied)",
		eff.applied, f.shopDB, eff.distinct, eff.duplicates)
	out.DurationMillis = time.Since(start).Milliseconds()
	if f.asJSON {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	}
	if out.Lost != 0 || out.InFlight != 0 {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo: reconcile failed: lost %d, in flight %d", out.Lost, out.InFlight)}
	}
	if !out.EffectsExactlyOnce {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo: %d orders recorded for %d event IDs: an effect was applied twice", out.EffectsApplied, out.EffectsDistinct)}
	}
	say("reconcile: OK — %d accepted = %d acked + %d dead-lettered + %d discarded; lost 0 (%.1fs)",
		out.Accepted, out.Acked, out.DeadLettered, out.Discarded, time.Since(start).Seconds())
	return nil
}

// demoReport fills out's ledger and dead-letter figures; with human set it
// prints the first half's report (ledger, dead letters by reason).
func demoReport(ctx context.Context, b *demoBackend, out *demoJSON, say func(string, ...any), stdout io.Writer, human bool) error {
	rows, err := reconcile(ctx, b.cat, b.counter())
	if err != nil {
		return err
	}
	byReason, err := b.cat.CountBy(ctx, "reason", catalog.Filter{Queue: out.Queue})
	if err != nil {
		return err
	}
	for _, r := range []evidence.Reason{evidence.ReasonPermanent, evidence.ReasonRetriesExhausted, evidence.ReasonDeliveryLimit} {
		byReason[string(r)] += 0
	}
	byState, err := b.cat.CountBy(ctx, "state", catalog.Filter{Queue: out.Queue})
	if err != nil {
		return err
	}
	out.DeadLettersByReason, out.NeedsManual = byReason, byState[string(catalog.StateNeedsManual)]
	var shown []ledger.Row
	for _, r := range rows {
		if r.Queue == out.Queue {
			out.Accepted, out.Acked, out.DeadLettered, out.Discarded, out.InFlight, out.Lost =
				r.Accepted, r.Acked, r.DeadLettered, r.Discarded, r.InFlight, r.Lost
			shown = append(shown, r)
		}
	}
	if !human {
		return nil
	}
	say("")
	printLedger(stdout, shown)
	say("\ndead letters by reason:")
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		say("  %-20s %d", r, byReason[r])
	}
	counter := map[string]string{lily.TransportSQLite: "store", lily.TransportRabbitMQ: "broker", lily.TransportKafka: "attempt counter",
		lily.TransportSQS: "broker's ApproximateReceiveCount", lily.TransportPubSub: "subscription's delivery attempt"}[out.Transport]
	if out.ShareGroup != "" {
		counter = "share group's delivery count (the broker's)"
	}
	say("\nworker restarts: %d (each crash-type poison was counted by the %s, not caught in the handler)", out.WorkerRestarts, counter)
	say("inspect it yourself: lily dlq list %s; lily reconcile %s", out.storeArg(), out.storeArg())
	return nil
}

// superviseDemo runs the worker as a child process until it exits cleanly
// (queue quiet), restarting it whenever it dies and giving its deliveries
// back at once (a broker does that by itself when the connection dies). It
// returns the number of restarts.
func superviseDemo(ctx context.Context, b *demoBackend, f demoFlags, say func(string, ...any), stderr io.Writer) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("demo: find the lily executable to start the worker: %w", err)
	}
	for restarts := 0; ; restarts++ {
		instance := "demo-worker-" + strconv.Itoa(restarts+1)
		if b.kafka != nil {
			instance = "demo-worker" // a static group member: the same ID after a restart
		}
		args := []string{"demo-worker", "--db", f.db, "--instance", instance, "--transport", f.transport, "--url", f.url, "--queue", f.queue}
		if b.kafka != nil {
			args = append(args, "--brokers", strings.Join(b.kafka.brokers, ","))
		}
		if f.shareGroup != "" {
			args = append(args, "--share-group", f.shareGroup)
		}
		if b.sqs != nil {
			args = append(args, b.sqs.workerArgs()...)
		}
		if b.pubsub != nil {
			args = append(args, "--pubsub-endpoint", b.pubsub.endpoint, "--pubsub-count", b.pubsub.countURL)
		}
		if f.verbose {
			args = append(args, "--verbose")
		}
		if f.fixed {
			args = append(args, "--fixed")
		}
		if f.shopDB != "" {
			args = append(args, "--shop-db", f.shopDB)
		}
		child := exec.CommandContext(ctx, exe, args...)
		child.Stdout = io.Discard
		child.Stderr = io.Discard
		if f.verbose {
			child.Stderr = stderr
		}
		err := child.Run()
		if err == nil {
			return restarts, nil
		}
		if ctx.Err() != nil {
			return restarts, ctx.Err()
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return restarts, fmt.Errorf("demo: start worker: %w", err)
		}
		if ee.ExitCode() > 0 {
			return restarts, fmt.Errorf("demo: the worker failed (%v); run with --verbose to see its log", ee.ProcessState)
		}
		n, rerr := b.recover(ctx, instance)
		if rerr != nil {
			return restarts, fmt.Errorf("demo: recover the dead worker's leases: %w", rerr)
		}
		switch {
		case b.sq != nil:
			say("worker %d died (%v) holding %d deliveries; restarting", restarts+1, ee.ProcessState, n)
		case b.kafka != nil && f.shareGroup != "":
			say("worker %d died (%v); the share group gives its records back, delivery counts raised by the broker; restarting", restarts+1, ee.ProcessState)
		case b.kafka != nil:
			say("worker %d died (%v); its records' counts were saved before its handler ran; restarting", restarts+1, ee.ProcessState)
		case b.pubsub != nil:
			say("worker %d died (%v); its deliveries come back when their ack deadline passes, delivery attempts raised; restarting", restarts+1, ee.ProcessState)
		default:
			say("worker %d died (%v); the broker requeued its deliveries; restarting", restarts+1, ee.ProcessState)
		}
		if restarts+1 > f.maxRestarts {
			return restarts, fmt.Errorf("demo: the worker died %d times, more than --max-restarts %d", restarts+1, f.maxRestarts)
		}
	}
}

// scenarioDB returns the database path of a scenario: --db, which must not
// exist yet, or a new file in a temporary directory.
func scenarioDB(f demoFlags, name string) (string, error) {
	if f.db == "" {
		dir, err := os.MkdirTemp("", "lily-"+name+"-")
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, "lily.db"), nil
	}
	if _, err := os.Stat(f.db); !errors.Is(err, fs.ErrNotExist) {
		return "", usagef("--db %s: the file exists; the demo creates a new database (choose a new path or remove it)", f.db)
	}
	return f.db, nil
}

// scenarioQueue returns --queue, or the scenario's own default queue.
func scenarioQueue(f demoFlags, def string) string {
	if f.queue == demoQueue {
		return def
	}
	return f.queue
}

// printScenario prints a scenario's result as JSON, or as text for a
// reader.
func printScenario[T any](w io.Writer, asJSON bool, out T, text func(io.Writer, T)) error {
	if asJSON {
		return writeJSON(w, out)
	}
	text(w, out)
	return nil
}

// runOrderingDemo runs 'lily demo --scenario ordering'.
func runOrderingDemo(ctx context.Context, f demoFlags, stdout io.Writer) error {
	path, err := scenarioDB(f, "ordering")
	if err != nil {
		return err
	}
	out, err := runOrderingScenario(ctx, f.conn(), scenarioQueue(f, "ledger.postings"), path)
	if err != nil {
		return err
	}
	if err := printScenario(stdout, f.asJSON, out, printOrderingScenario); err != nil {
		return err
	}
	if out.Lost != 0 || !out.InOrder {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo ordering: lost %d, in order %v", out.Lost, out.InOrder)}
	}
	return nil
}

// runOutageDemo runs 'lily demo --scenario outage'.
func runOutageDemo(ctx context.Context, f demoFlags, stdout io.Writer) error {
	path, err := scenarioDB(f, "outage")
	if err != nil {
		return err
	}
	queue := scenarioQueue(f, "outage.orders")
	out, err := runOutageScenario(ctx, outageFlags{conn: f.conn(), queue: queue, db: path,
		rate: f.rate, outage: f.outage, breaker: f.breaker}, stdout)
	if err != nil {
		return err
	}
	if err := printScenario(stdout, f.asJSON, out, printOutageScenario); err != nil {
		return err
	}
	if out.Lost != 0 {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo outage: %d messages unaccounted for", out.Lost)}
	}
	return nil
}

// demoCatalogFresh refuses a shared catalog that already knows the demo's
// queue: its ledger and work list would not be the demo's own.
func demoCatalogFresh(ctx context.Context, cat *catalog.Store, queue string) error {
	rows, err := ledger.New(cat).Rows(ctx, nil)
	if err != nil {
		return err
	}
	byState, err := cat.CountBy(ctx, "state", catalog.Filter{Queue: queue})
	if err != nil {
		return err
	}
	known := len(byState) > 0
	for _, r := range rows {
		known = known || r.Queue == queue
	}
	if known {
		return usagef("--catalog: the catalog already holds queue %s (ledger or dead letters of an earlier run); the demo needs a catalog without it: "+
			"pass --queue with a new name, or a fresh database or schema (e.g. add ?search_path=demo2 after creating that schema)", queue)
	}
	return nil
}

// storeArg is the flag that names the demo's catalog to other commands.
func (o demoJSON) storeArg() string {
	if o.Catalog != "" {
		return "--catalog '" + o.Catalog + "'"
	}
	return "--db " + o.DB
}
