// Package demo is 'lily demo': Lily's main job — an order consumer with
// poison messages — run end to end on the embedded store or on a broker, with
// worker processes that crash and are restarted, then the operator's work on
// the dead letters, and a reconcile that shows nothing was lost; and its
// scenarios outage (the circuit breaker) and ordering (park).
//
// The demo starts its workers by running its own binary again as
// '<binary> demo-worker', so a command that runs the demo registers both:
// NewFlags and Run for the demo, NewWorkerFlags and RunWorker for the worker.
//
// The package links no broker emulator. A demo on an in-process broker —
// Kafka without --brokers, SQS without an http(s) --url, Pub/Sub — starts it
// through the Emulators its command passes: cmd/lily-demo passes its own,
// the lily binary none, and the demo then refuses naming the flag and the
// command that has them.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/nats"
)

// Result is the --json output of 'lily demo'.
type Result struct {
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

// Flags are the demo's command-line flags, registered by NewFlags.
type Flags struct {
	db, transport, url, brokers, queue   string
	shareGroup                           string // Kafka share group (--share-group, share.go); "" for a consumer group
	catalog                              string // PostgreSQL catalog URL (--catalog)
	messages, malformed, flaky, hopeless int
	crashing, maxRestarts                int
	seed                                 uint64
	asJSON, verbose                      bool
	noRedrive                            bool
	fixed                                bool   // the worker runs the fixed handler
	shopDB                               string // the shop's database (inbox.go); "" for none
	scenario                             string
	rate                                 float64
	outage                               time.Duration
	breaker                              bool
	em                                   Emulators // the in-process brokers the command can start; nil for none
}

// NewFlags registers the demo's flags on fs and returns them, to pass to
// Run once fs is parsed. em are the in-process brokers the command can
// start (nil: none, as in the lily binary); the help texts say which.
func NewFlags(fs *pflag.FlagSet, em Emulators) *Flags {
	f := &Flags{em: em}
	transportHelp := "where the queue lives: sqlite (embedded, no service), rabbitmq (--url), kafka (--brokers), sqs (--url https://sqs.<region>.amazonaws.com), pubsub (in-process only: " + lilyDemo + " --transport pubsub), nats (--url nats://..., default " + nats.DefaultURL + ") or azqueue (Azure Storage queues: --url http(s)://..., default Azurite's " + azqueue.AzuriteURL + ")"
	brokersHelp := "Kafka seed brokers host:port,..., with --transport kafka (required here; on an in-process Kafka: " + lilyDemo + " --transport kafka)"
	if em != nil {
		transportHelp = "where the queue lives: sqlite (embedded, no service), rabbitmq, kafka, sqs (an in-process SQS emulator, or --url https://sqs.<region>.amazonaws.com), pubsub (an in-process Pub/Sub fake), nats (--url nats://..., default " + nats.DefaultURL + ") or azqueue (Azure Storage queues: --url http(s)://..., default Azurite's " + azqueue.AzuriteURL + ")"
		brokersHelp = "Kafka seed brokers host:port,..., with --transport kafka (default: an in-process Kafka, kfake)"
	}
	fs.StringVar(&f.db, "db", "", "SQLite file to create for the demo: the store, or the catalog with --transport rabbitmq (default: a new file in a temporary directory)")
	fs.StringVar(&f.catalog, "catalog", "", "PostgreSQL catalog URL for the dead letters and the ledger, with --transport rabbitmq or kafka (instead of --db); the catalog must not know the demo's queue yet")
	fs.StringVar(&f.transport, "transport", lily.TransportSQLite, transportHelp)
	fs.StringVar(&f.url, "url", config.DefaultRabbitMQURL, "AMQP URL of the broker, with --transport rabbitmq; SQS endpoint (http(s)://...) with --transport sqs; NATS server (nats://...) with --transport nats; queue service URL (http(s)://...) with --transport azqueue")
	fs.StringVar(&f.brokers, "brokers", "", brokersHelp)
	fs.StringVar(&f.shareGroup, "share-group", "", "with --transport kafka: consume the queue through this Kafka share group (KIP-932; Kafka 4.1+), not a consumer group")
	fs.StringVar(&f.queue, "queue", DefaultQueue, "name of the demo's queue (its exchange is the part before the first dot)")
	fs.IntVar(&f.messages, "messages", 1000, "orders to publish in all")
	fs.IntVar(&f.malformed, "malformed", 10, "orders whose body does not decode")
	fs.IntVar(&f.flaky, "flaky", 50, "orders that fail transiently and succeed on their 2nd or 3rd attempt")
	fs.IntVar(&f.hopeless, "hopeless", 5, "orders that always fail transiently")
	fs.IntVar(&f.crashing, "crashing", 3, "orders that kill the worker process")
	fs.IntVar(&f.maxRestarts, "max-restarts", 100, "give up after this many worker restarts")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the workload's shuffle and order data")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&f.verbose, "verbose", false, "show the worker's log on stderr")
	fs.BoolVar(&f.noRedrive, "no-redrive", false, "stop after the first half: leave the dead letters in the work list")
	fs.StringVar(&f.scenario, "scenario", "poison", "poison (the workload above), outage (healthy traffic against a dependency that is down longer than the retry span) or ordering (per-account order kept with ordering = \"park\" while one account's posting fails)")
	fs.Float64Var(&f.rate, "rate", 100, "with --scenario outage: messages per second")
	fs.DurationVar(&f.outage, "outage", 4*time.Second, "with --scenario outage: how long the dependency is down")
	fs.BoolVar(&f.breaker, "breaker", true, "with --scenario outage: use the circuit breaker (--breaker=false to see the outage dead-letter healthy messages)")
	return f
}

// Short is the demo command's one-line help.
const Short = "Run an order consumer with poison messages on the embedded store and prove nothing was lost"

// Long is the demo command's help; em as given to NewFlags.
func Long(em Emulators) string {
	brokers := `With --transport rabbitmq (--url), kafka (--brokers) or sqs (--url
https://sqs.<region>.amazonaws.com) the queue lives on that broker and the
catalog in the SQLite file. On Kafka the crashing orders are counted by the
attempt counter topic.`
	emulators := `

The demos on in-process brokers — Kafka without --brokers (kfake), SQS on an
emulator (goaws), Pub/Sub on a fake (pstest) — are a separate command, so that
lily links no emulator. It takes the same flags:
  ` + lilyDemo + ` --transport kafka|sqs|pubsub [--share-group NAME] ...`
	if em != nil {
		brokers = `With --transport rabbitmq (--url) or kafka (--brokers) the queue lives on a
broker and the catalog in the SQLite file. On Kafka without --brokers the demo
starts an in-process Kafka (kfake) that its worker processes reach over TCP;
the crashing orders are counted by the attempt counter topic. --transport sqs
without an http(s) --url starts an SQS emulator (goaws), --transport pubsub a
Pub/Sub fake (pstest), each in the demo's process on a local TCP port.`
		emulators = ""
	}
	return `Run Lily's main job on the embedded SQLite store, with no service to start.

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

` + brokers + `

With --share-group NAME the Kafka queue is consumed by share group NAME instead:
the broker counts the deliveries, delivery_limit is 4 (below the broker's
default group.share.delivery.count.limit of 5, past which it would archive a
crashing order silently), and the counts are the same.` + emulators
}

// Run runs the demo the parsed flags describe: the poison workload, or
// --scenario outage or ordering. Its errors are *ExitError where the
// command should exit with a code of its own.
func Run(ctx context.Context, f *Flags, stdout, stderr io.Writer) error {
	if err := f.validateShareGroup(); err != nil { // every scenario
		return usagef("demo: %v", err)
	}
	if f.scenario == "poison" {
		if err := f.validate(); err != nil {
			return err
		}
	}
	if err := f.checkEmulators(); err != nil { // every scenario, before anything is created
		return err
	}
	switch f.scenario {
	case "poison":
		return runPoison(ctx, *f, stdout, stderr)
	case "outage":
		return runOutageDemo(ctx, *f, stdout)
	case "ordering":
		return runOrderingDemo(ctx, *f, stdout)
	}
	return usagef("--scenario %q: must be poison (the default), outage or ordering", f.scenario)
}

// ExitError ends a demo with the exit code it calls for: 2 for bad input
// (the message names the flag, the value and the fix), 1 for a check that
// failed after the demo printed what it found. A command prints Msg and
// exits with Code.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// usagef is the ExitError of bad input.
func usagef(format string, args ...any) error {
	return &ExitError{Code: 2, Msg: fmt.Sprintf(format, args...)}
}

// conn says where the demo's queue lives.
func (f Flags) conn() connection {
	return connection{kind: f.transport, url: f.url, brokers: f.brokers, em: f.em}
}

// validate checks the poison workload's flags, reporting every bad one.
func (f Flags) validate() error {
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
	case lily.TransportSQLite, lily.TransportRabbitMQ, lily.TransportKafka, lily.TransportSQS, lily.TransportPubSub, lily.TransportNATS, lily.TransportAzQueue:
	default:
		errs = append(errs, fmt.Errorf("--transport %q: must be sqlite, rabbitmq, kafka, sqs, pubsub, nats or azqueue", f.transport))
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
	if dl := QueueConfig(f.queue, f.transport, f.shareGroup).Settings().DeliveryLimit; f.maxRestarts < f.crashing*dl {
		errs = append(errs, fmt.Errorf("--max-restarts %d: must be >= --crashing × delivery_limit (%d)", f.maxRestarts, f.crashing*dl))
	}
	if len(errs) > 0 {
		return &ExitError{Code: 2, Msg: "demo: " + errors.Join(errs...).Error()}
	}
	return nil
}

// scenarioDB returns the database path of a scenario: --db, which must not
// exist yet, or a new file in a temporary directory.
func scenarioDB(f Flags, name string) (string, error) {
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
func scenarioQueue(f Flags, def string) string {
	if f.queue == DefaultQueue {
		return def
	}
	return f.queue
}

// printScenario prints a scenario's result as JSON, or as text for a
// reader.
func printScenario[T any](w io.Writer, asJSON bool, out T, text func(io.Writer, T)) error {
	if asJSON {
		return report.JSON(w, out)
	}
	text(w, out)
	return nil
}
