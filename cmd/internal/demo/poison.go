package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// runPoison runs the poison workload, its flags validated: the first half (publish, the
// supervised workers, the report and reconcile), then, without
// --no-redrive, the second half (redrive.go), and checks the shop's
// effects (inbox.go).
func runPoison(ctx context.Context, f Flags, stdout, stderr io.Writer) error {
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
	shop, err := shopPath(f)
	if err != nil {
		return err
	}
	f.shopDB = shop
	say := func(format string, args ...any) {
		if !f.asJSON {
			fmt.Fprintf(stdout, format+"\n", args...)
		}
	}
	qc := QueueConfig(f.queue, f.transport, f.shareGroup)
	if err := qc.Validate(); err != nil {
		return usagef("--queue %q: %v", f.queue, err)
	}
	b, err := openBackend(ctx, f.conn(), path, qc)
	if err != nil {
		return err
	}
	defer b.Close()
	if f.catalog != "" {
		if err := catalogFresh(ctx, b.cat, qc.Name); err != nil {
			return err
		}
	}
	if err := b.declare(ctx); err != nil {
		return err
	}
	msgs, _ := Workload(f.messages, f.malformed, f.flaky, f.hopeless, f.crashing, f.seed)
	for i := 0; i < len(msgs); i += 500 {
		if err := lily.Publish(ctx, b.tr, qc.Name, msgs[i:min(i+500, len(msgs))]); err != nil {
			return err
		}
	}
	where := "the embedded SQLite store (" + path + ")"
	switch f.transport {
	case lily.TransportRabbitMQ:
		where = "RabbitMQ (" + report.RedactedURL(f.url) + "), catalog " + path
	case lily.TransportKafka:
		where = b.kafka.where() + shareWhere(f.shareGroup) + ", catalog " + path
	case lily.TransportSQS:
		where = b.sqs.where() + ", catalog " + path
	case lily.TransportPubSub:
		where = b.pubsub.where() + ", catalog " + path
	case lily.TransportNATS:
		where = b.nats.where() + ", catalog " + path
	case lily.TransportAzQueue:
		where = b.azq.where() + ", catalog " + path
	}
	say("Lily demo: queue %s on %s", qc.Name, where)
	say("published %d orders: %d malformed, %d flaky, %d hopeless, %d crashing; retries %v ms, delivery limit %d",
		f.messages, f.malformed, f.flaky, f.hopeless, f.crashing, qc.Policy().Buckets(), qc.Settings().DeliveryLimit)

	restarts, err := supervise(ctx, b, f, say, stderr)
	if err != nil {
		return err
	}
	if err := b.finish(ctx); err != nil {
		return err
	}
	out := Result{DB: path, Transport: f.transport, ShareGroup: f.shareGroup, Queue: qc.Name, Messages: f.messages, WorkerRestarts: restarts}
	if f.catalog != "" {
		out.DB, out.Catalog = "", report.RedactedURL(f.catalog)
	}
	if err := reconcileRun(ctx, b, &out, say, stdout, !f.asJSON); err != nil {
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
		r, err := secondHalf(ctx, b, f, say, stderr)
		out.WorkerRestarts += r.restarts
		out.Redriven, out.RedriveRounds = r.redriven, r.rounds
		if err != nil {
			return err
		}
		if err := reconcileRun(ctx, b, &out, say, stdout, false); err != nil {
			return err
		}
		if !f.asJSON {
			say("")
			report.Ledger(stdout, []ledger.Row{{Queue: out.Queue, Accepted: out.Accepted, Acked: out.Acked,
				DeadLettered: out.DeadLettered, Discarded: out.Discarded, InFlight: out.InFlight, Lost: out.Lost}})
			say("\nredriven %d in %d rounds, %d discarded with a record, %d left for a manual decision; every decision: lily audit %s",
				out.Redriven, out.RedriveRounds, r.discarded, out.NeedsManual, out.storeArg())
		}
	}
	eff, err := readShop(ctx, f.shopDB)
	if err != nil {
		return err
	}
	out.ShopDB, out.EffectsApplied, out.EffectsDistinct, out.DuplicatesAbsorbed = f.shopDB, eff.applied, eff.distinct, eff.duplicates
	out.EffectsExactlyOnce = eff.applied == eff.distinct
	say("inbox: %d orders recorded in %s, each exactly once (%d distinct event IDs); %d duplicate deliveries absorbed (redelivered after a crash between commit and ack, or redriven after they were applied)",
		eff.applied, f.shopDB, eff.distinct, eff.duplicates)
	out.DurationMillis = time.Since(start).Milliseconds()
	if f.asJSON {
		if err := report.JSON(stdout, out); err != nil {
			return err
		}
	}
	if out.Lost != 0 || out.InFlight != 0 {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo: reconcile failed: lost %d, in flight %d", out.Lost, out.InFlight)}
	}
	if !out.EffectsExactlyOnce {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo: %d orders recorded for %d event IDs: an effect was applied twice", out.EffectsApplied, out.EffectsDistinct)}
	}
	got := maps.Clone(out.DeadLettersByReason) // its report lists every reason, 0 too
	maps.DeleteFunc(got, func(_ string, n int64) bool { return n == 0 })
	if want := workloadClasses(f); !maps.Equal(got, want) {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo: dead letters by reason %v, the workload's classes %v: an order was dead-lettered for a reason it was not built for%s",
			out.DeadLettersByReason, want, b.hiddenDeadLetters(ctx))}
	}
	say("reconcile: OK — %d accepted = %d acked + %d dead-lettered + %d discarded; lost 0 (%.1fs)",
		out.Accepted, out.Acked, out.DeadLettered, out.Discarded, time.Since(start).Seconds())
	return nil
}

// reconcileRun fills out's ledger and dead-letter figures; with human set it
// prints the first half's report (ledger, dead letters by reason).
func reconcileRun(ctx context.Context, b *backend, out *Result, say func(string, ...any), stdout io.Writer, human bool) error {
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
	report.Ledger(stdout, shown)
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
		lily.TransportSQS: "broker's ApproximateReceiveCount", lily.TransportPubSub: "subscription's delivery attempt",
		lily.TransportNATS: "server's NumDelivered", lily.TransportAzQueue: "service's DequeueCount"}[out.Transport]
	if out.ShareGroup != "" {
		counter = "share group's delivery count (the broker's)"
	}
	say("\nworker restarts: %d (each crash-type poison was counted by the %s, not caught in the handler)", out.WorkerRestarts, counter)
	say("inspect it yourself: lily dlq list %s; lily reconcile %s", out.storeArg(), out.storeArg())
	return nil
}

// supervise runs the worker as a child process until it exits cleanly
// (queue quiet), restarting it whenever it dies and giving its deliveries
// back at once (a broker does that by itself when the connection dies). It
// returns the number of restarts.
func supervise(ctx context.Context, b *backend, f Flags, say func(string, ...any), stderr io.Writer) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("demo: find this executable to start the worker: %w", err)
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
		if b.nats != nil {
			args = append(args, "--url", b.nats.url)
		}
		if b.azq != nil {
			args = append(args, "--url", b.azq.url)
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
			say("worker %d died (%v) holding %s; restarting", restarts+1, ee.ProcessState, plural(n, "delivery", "deliveries"))
		case b.kafka != nil && f.shareGroup != "":
			say("worker %d died (%v); the share group gives its records back, delivery counts raised by the broker; restarting", restarts+1, ee.ProcessState)
		case b.kafka != nil:
			say("worker %d died (%v); its records' counts were saved before its handler ran; restarting", restarts+1, ee.ProcessState)
		case b.pubsub != nil:
			say("worker %d died (%v); its deliveries come back when their ack deadline passes, delivery attempts raised; restarting", restarts+1, ee.ProcessState)
		case b.nats != nil:
			say("worker %d died (%v); its deliveries come back when their AckWait passes, NumDelivered raised by the server; restarting", restarts+1, ee.ProcessState)
		case b.azq != nil:
			say("worker %d died (%v); its deliveries come back when their visibility timeout passes, DequeueCount raised by the service; restarting", restarts+1, ee.ProcessState)
		default:
			say("worker %d died (%v); the broker requeued its deliveries; restarting", restarts+1, ee.ProcessState)
		}
		if restarts+1 > f.maxRestarts {
			return restarts, fmt.Errorf("demo: the worker died %d times, more than --max-restarts %d", restarts+1, f.maxRestarts)
		}
	}
}

// catalogFresh refuses a shared catalog that already knows the demo's
// queue: its ledger and work list would not be the demo's own.
func catalogFresh(ctx context.Context, cat *catalog.Store, queue string) error {
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
func (o Result) storeArg() string {
	if o.Catalog != "" {
		return "--catalog '" + o.Catalog + "'"
	}
	return "--db " + o.DB
}

// reconcile returns the ledger with in-flight counts from the transport,
// as 'lily reconcile' does.
func reconcile(ctx context.Context, cat *catalog.Store, inflight transport.InFlightCounter) ([]ledger.Row, error) {
	rows, err := ledger.New(cat).Rows(ctx, inflight)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return rows, nil
}

// plural says "1 delivery" or "n deliveries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// workloadClasses is what the workload's orders must end as in the
// catalog, by reason: every malformed order dead-lettered as permanent,
// every hopeless one once its retries ran out, every crashing one at the
// delivery limit — and no other order at all (a flaky order that was
// dead-lettered, or an innocent one beside a crash, fails the demo).
func workloadClasses(f Flags) map[string]int64 {
	want := map[string]int64{}
	for reason, n := range map[evidence.Reason]int{evidence.ReasonPermanent: f.malformed,
		evidence.ReasonRetriesExhausted: f.hopeless, evidence.ReasonDeliveryLimit: f.crashing} {
		if n > 0 {
			want[string(reason)] = int64(n)
		}
	}
	return want
}
