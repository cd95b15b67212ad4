// Command fleetbench runs Lily as a fleet runs it and checks that nothing
// is lost or doubled (issue 15's fleet numbers): consumer processes on one
// RabbitMQ quorum queue and 'lily serve' replicas, all on one PostgreSQL
// catalog; a handler that fails transiently for some messages and
// permanently for others; one consumer and one replica killed with
// SIGKILL halfway; then the fix, a redrive job over the API of one replica
// (whichever runs it), and the ledger.
//
//	cd bench && go run ./cmd/fleetbench -n 100000 -consumers 4 -replicas 2
//
// It needs RabbitMQ (127.0.0.1:5672 with the management plugin) and
// PostgreSQL (127.0.0.1:5432, trust auth, database test); it makes a
// schema and a queue of its own and removes them at the end. It prints a
// markdown table and exits 1 when any check fails.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/bench/internal/fleet"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The consumer role: the same binary, started by the bench.
const (
	roleEnv   = "FLEETBENCH_ROLE"
	configEnv = "FLEETBENCH_CONFIG"
	queueEnv  = "FLEETBENCH_QUEUE"
	fixedEnv  = "FLEETBENCH_FIXED" // a file: once it exists, the permanent failures are fixed
)

// Which messages fail: every permanentEvery-th permanently (until the
// fix), every transientEvery-th once transiently (it succeeds on its
// retry).
const (
	permanentEvery = 100
	transientEvery = 20
)

func main() {
	if os.Getenv(roleEnv) == "consumer" {
		os.Exit(consume())
	}
	os.Exit(run())
}

// consume is one consumer process: it runs until SIGTERM (graceful) or
// SIGKILL.
func consume() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if path := os.Getenv("FLEETBENCH_CPUPROFILE"); path != "" {
		// A consumer's CPU profile, one file per process: where the
		// accounting's time goes.
		f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	cfg, err := config.LoadConfig(os.Getenv(configEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	qc, _ := cfg.Queue(os.Getenv(queueEnv))
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: cfg.RabbitMQURL})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	cat, err := catalog.Open(ctx, cfg.CatalogURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer cat.Close()
	tr.Register(qc.Spec())
	fixed := os.Getenv(fixedEnv)
	h := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		i, err := strconv.Atoi(string(d.Body))
		if err != nil {
			return lily.Permanent(err)
		}
		if i%permanentEvery == 0 {
			if _, err := os.Stat(fixed); err != nil {
				return lily.Permanent(fmt.Errorf("order %d: schema v2 not supported", i))
			}
		}
		if i%transientEvery == 1 && d.RetryCount == 0 {
			return fmt.Errorf("order %d: payment gateway timeout", i)
		}
		return nil
	})
	c, err := lily.NewConsumer(ledger.Account(tr, ledger.New(cat)), h, lily.ConsumerOptions{Queue: qc, Concurrency: 32, Prefetch: 256,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type options struct {
	n, consumers, replicas int
	pg, amqp, lilyBin      string
	kill, prefill          bool
}

func run() int {
	var o options
	flag.IntVar(&o.n, "n", 100000, "messages")
	flag.IntVar(&o.consumers, "consumers", 4, "consumer processes")
	flag.IntVar(&o.replicas, "replicas", 2, "'lily serve' replicas")
	flag.StringVar(&o.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server (a schema of its own is made)")
	flag.StringVar(&o.amqp, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ")
	flag.StringVar(&o.lilyBin, "lily", "", "the lily binary (default: built from ../cmd/lily)")
	flag.BoolVar(&o.kill, "kill", true, "kill one consumer and one replica with SIGKILL halfway (restarting them)")
	flag.BoolVar(&o.prefill, "prefill", false, "publish every message before the consumers start, so that the first pass measures consumption alone (as rabbitbench does); needs -kill=false")
	flag.Parse()
	if o.prefill && o.kill {
		fmt.Fprintln(os.Stderr, "fleetbench: -prefill needs -kill=false (the kill happens halfway through publishing, while consumers run)")
		return 2
	}
	b, err := newBench(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		return 2
	}
	defer b.cleanup()
	if err := b.run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		return 1
	}
	return 0
}

// bench is one run.
type bench struct {
	o        options
	dir      string
	schema   string
	catURL   string
	cfgPath  string
	queue    string
	qc       lily.QueueConfig
	tr       *rabbitmq.Transport
	cat      *catalog.Store
	admin    *sql.DB
	procs    []*exec.Cmd
	replicas []*replica
	failed   []string
}

type replica struct {
	cmd  *exec.Cmd
	out  *transporttest.SyncBuffer
	base string
}

func newBench(o options) (*bench, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fleetbench-")
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, dir: dir, queue: fmt.Sprintf("fleet%08x.orders", rand.Uint32())}
	b.schema = "fleetbench_" + strings.ReplaceAll(strings.SplitN(b.queue, ".", 2)[0], "fleet", "")
	if b.admin, err = sql.Open("pgx", o.pg); err != nil {
		return nil, err
	}
	if b.catURL, err = fleet.CreateSchema(ctx, b.admin, o.pg, b.schema); err != nil {
		return nil, err
	}
	b.cfgPath = filepath.Join(dir, "lily.toml")
	cfg := fmt.Sprintf(`rabbitmq_url = %q
catalog_url = %q
[[queue]]
name = %q
transport = "rabbitmq"
retry_attempts = 2
retry_backoff_millis = 200
max_retry_backoff_millis = 400
delivery_limit = 5
max_redrives = 2
`, o.amqp, b.catURL, b.queue)
	if err := os.WriteFile(b.cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	c, err := config.LoadConfig(b.cfgPath)
	if err != nil {
		return nil, err
	}
	b.qc, _ = c.Queue(b.queue)
	if o.lilyBin == "" {
		o.lilyBin = filepath.Join(dir, "lily")
		build := exec.Command("go", "build", "-o", o.lilyBin, "github.com/lily-mq/lily/cmd/lily")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("build lily: %w", err)
		}
		b.o.lilyBin = o.lilyBin
	}
	if b.tr, err = rabbitmq.Open(ctx, rabbitmq.Options{URL: o.amqp}); err != nil {
		return nil, err
	}
	if b.cat, err = catalog.Open(ctx, b.catURL); err != nil {
		return nil, err
	}
	acc := ledger.Account(b.tr, ledger.New(b.cat))
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{b.qc.Spec()}}); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bench) cleanup() {
	ctx := context.Background()
	for _, p := range b.procs {
		if p.ProcessState == nil {
			p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				p.Process.Kill()
			}
		}
	}
	if b.tr != nil {
		b.tr.DeleteQueues(ctx, b.qc.Spec())
		b.tr.Close()
	}
	if b.cat != nil {
		b.cat.Close()
	}
	if b.admin != nil {
		fleet.DropSchema(ctx, b.admin, b.schema)
		b.admin.Close()
	}
	os.RemoveAll(b.dir)
}

func (b *bench) startConsumer() *exec.Cmd {
	cmd, err := fleet.Start(roleEnv+"=consumer", configEnv+"="+b.cfgPath, queueEnv+"="+b.queue, fixedEnv+"="+filepath.Join(b.dir, "fixed"))
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		b.fail("start consumer: %v", err)
		return cmd
	}
	b.procs = append(b.procs, cmd)
	return cmd
}

func (b *bench) startReplica() *replica {
	out := &transporttest.SyncBuffer{}
	cmd := exec.Command(b.o.lilyBin, "serve", "--config", b.cfgPath, "--listen", "127.0.0.1:0",
		"--ingest-interval", "500ms", "--ingest-lease-ttl", "3s", "--job-lease", "3s")
	cmd.Env = append(os.Environ(), "LILY_TOKENS=")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.fail("start replica: %v", err)
		return nil
	}
	b.procs = append(b.procs, cmd)
	r := &replica{cmd: cmd, out: out}
	re := regexp.MustCompile(`on http://\S+:(\d+)/`)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			r.base = "http://127.0.0.1:" + m[1]
			return r
		}
	}
	b.fail("replica printed no address: %s", out.String())
	return r
}

func (b *bench) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "FAIL:", msg)
	b.failed = append(b.failed, msg)
}

// ledger is the queue's ledger row, with the broker's in-flight count.
func (b *bench) ledger(ctx context.Context) (ledger.Row, error) {
	rows, err := ledger.New(b.cat).Rows(ctx, ledger.Account(b.tr, ledger.New(b.cat)))
	if err != nil {
		return ledger.Row{}, err
	}
	for _, r := range rows {
		if r.Queue == b.queue {
			return r, nil
		}
	}
	return ledger.Row{}, fmt.Errorf("queue %s not in the ledger", b.queue)
}

// settled waits until everything accepted is acked, dead-lettered (and
// ingested) or discarded, nothing in flight.
func (b *bench) settled(ctx context.Context, what string, done func(ledger.Row) bool) (ledger.Row, time.Duration) {
	start := time.Now()
	var r ledger.Row
	var err error
	for deadline := time.Now().Add(15 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if r, err = b.ledger(ctx); err == nil && r.InFlight == 0 && done(r) {
			return r, time.Since(start)
		}
	}
	b.fail("%s: not settled within 15 minutes: %+v %v", what, r, err)
	return r, time.Since(start)
}

func (b *bench) run() error {
	ctx := context.Background()
	n := b.o.n
	for range b.o.replicas {
		b.replicas = append(b.replicas, b.startReplica())
	}
	var consumers []*exec.Cmd
	startConsumers := func() {
		for range b.o.consumers {
			consumers = append(consumers, b.startConsumer())
		}
	}
	if !b.o.prefill {
		startConsumers()
	}
	acc := ledger.Account(b.tr, ledger.New(b.cat))
	start := time.Now()
	cpu0 := fleet.ReadCPU(consumers, fleet.RabbitMQ)
	killed := false
	for i := 0; i < n; i += 500 {
		var msgs []lily.Message
		for j := i; j < min(i+500, n); j++ {
			msgs = append(msgs, lily.Message{Body: []byte(strconv.Itoa(j))})
		}
		if err := lily.Publish(ctx, acc, b.queue, msgs); err != nil {
			return err
		}
		if b.o.kill && !killed && i >= n/2 {
			killed = true
			consumers[0].Process.Kill()
			consumers[0].Wait()
			b.replicas[0].cmd.Process.Kill()
			b.replicas[0].cmd.Wait()
			consumers[0] = b.startConsumer()
			b.replicas[0] = b.startReplica()
		}
	}
	published := time.Since(start)
	if b.o.prefill {
		// The first pass is timed from the consumers' start: their
		// processes' start-up is in it, the publishing is not.
		start = time.Now()
		cpu0 = fleet.ReadCPU(consumers, fleet.RabbitMQ)
		startConsumers()
	}
	wantDead := int64((n + permanentEvery - 1) / permanentEvery)
	first, _ := b.settled(ctx, "first pass", func(r ledger.Row) bool { return r.Acked+r.DeadLettered >= int64(n) })
	consumed := time.Since(start)
	cpu1 := fleet.ReadCPU(consumers, fleet.RabbitMQ)
	// The dead letters are counted while still in the broker's DLQ; the
	// replicas' continuous ingest brings them into the catalog.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		d, err := acc.DeadLetterDepth(ctx, b.queue)
		if err == nil && d == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.fail("the broker DLQ still holds %d (%v) two minutes after the first pass: ingest stopped", d, err)
			break
		}
	}
	ingested := time.Since(start)
	entries, distinct := b.entries(ctx)
	if first.Accepted != int64(n) || first.DeadLettered != wantDead || first.Lost != 0 {
		b.fail("after the first pass: ledger %+v, want accepted %d, dead-lettered %d, lost 0", first, n, wantDead)
	}
	if entries != wantDead || distinct != wantDead {
		b.fail("catalog holds %d entries (%d distinct event IDs), want exactly %d: none lost, none doubled", entries, distinct, wantDead)
	}
	// The fix ships; the operator redrives the permanent failures.
	if err := os.WriteFile(filepath.Join(b.dir, "fixed"), nil, 0o644); err != nil {
		return err
	}
	redriveStart := time.Now()
	job, err := b.redrive(ctx)
	if err != nil {
		return err
	}
	final, _ := b.settled(ctx, "after the redrive", func(r ledger.Row) bool { return r.Acked == int64(n) })
	redriveTook := time.Since(redriveStart)
	if final.Accepted != int64(n) || final.Acked != int64(n) || final.DeadLettered != 0 || final.Lost != 0 {
		b.fail("after the redrive: ledger %+v, want every message acked, lost 0", final)
	}
	jobs, err := redrive.New(b.cat).Jobs(ctx, redrive.JobQuery{})
	if err != nil {
		return err
	}
	if len(jobs) != 1 || jobs[0].State != redrive.JobDone || jobs[0].Done() != int(wantDead) {
		b.fail("jobs %+v: want one, done once, with %d entries", jobs, wantDead)
	}
	st, err := b.cat.CountBy(ctx, "state", catalog.Filter{Queue: b.queue})
	if err != nil {
		return err
	}
	rec := exec.Command(b.o.lilyBin, "reconcile", "--config", b.cfgPath)
	recOut, recErr := rec.CombinedOutput()
	if recErr != nil {
		b.fail("lily reconcile: %v\n%s", recErr, recOut)
	}
	kill := "none"
	if b.o.prefill {
		kill = "none (prefilled)"
	}
	if b.o.kill {
		kill = "1 consumer + 1 replica (SIGKILL, restarted)"
	}
	fmt.Printf("| messages | consumers | replicas | killed | publish | first pass | ingested by | dead letters (entries) | doubled | redrive job | after redrive | lost | reconcile |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Printf("| %d | %d | %d | %s | %.1f s (%.0f msg/s) | %.1f s (%.0f msg/s) | %.1f s | %d (%d) | %d | job %d %s, %d entries by %s | acked %d in %.1f s | %d | %s |\n",
		n, b.o.consumers, b.o.replicas, kill, published.Seconds(), float64(n)/published.Seconds(), consumed.Seconds(), float64(n)/consumed.Seconds(),
		ingested.Seconds(), first.DeadLettered, entries, entries-distinct, job.ID, job.State, job.Done(), orDash(jobs, func(j *redrive.Job) string { return j.Actor }),
		final.Acked, redriveTook.Seconds(), final.Lost, map[bool]string{true: "OK", false: "FAILED"}[recErr == nil])
	cpuConsumers, cpuPG, cpuBroker := cpu1.PerMessage(cpu0, n)
	fmt.Printf("\nfirst pass CPU per message: consumer processes %.1f µs, PostgreSQL %.1f µs, RabbitMQ %.1f µs (/proc, over the first pass)\n",
		cpuConsumers, cpuPG, cpuBroker)
	fmt.Printf("entry states: %v; handler: every %dth message fails permanently until the fix, every %dth once transiently\n", st, permanentEvery, transientEvery)
	if d, _ := time.ParseDuration(os.Getenv("FLEETBENCH_HOLD")); d > 0 {
		fmt.Fprintf(os.Stderr, "holding %s before cleanup (queue %s)\n", d, b.queue)
		time.Sleep(d)
	}
	if len(b.failed) > 0 {
		return fmt.Errorf("%d checks failed: %s", len(b.failed), strings.Join(b.failed, "; "))
	}
	return nil
}

func orDash(js []*redrive.Job, f func(*redrive.Job) string) string {
	if len(js) == 0 {
		return "-"
	}
	return f(js[0])
}

// entries counts the queue's catalog entries and their distinct event IDs.
func (b *bench) entries(ctx context.Context) (n, distinct int64) {
	ids := map[string]bool{}
	b.cat.Each(ctx, catalog.Filter{Queue: b.queue}, func(e *catalog.Entry) error {
		n++
		ids[e.EventID] = true
		return nil
	})
	return n, int64(len(ids))
}

// redrive starts a redrive job of the permanent failures over the API of
// the first replica and waits until the catalog says it is done.
func (b *bench) redrive(ctx context.Context) (*redrive.Job, error) {
	req := fmt.Sprintf(`{"filter":{"queue":%q,"reason":"permanent"},"rate":0}`, b.queue)
	resp, err := http.Post(b.replicas[len(b.replicas)-1].base+"/api/redrives", "application/json", strings.NewReader(req))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v struct{ ID int64 }
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &v) != nil {
		return nil, fmt.Errorf("POST /api/redrives: %d %s", resp.StatusCode, body)
	}
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		j, err := redrive.New(b.cat).Job(ctx, v.ID)
		if err != nil {
			return nil, err
		}
		switch j.State {
		case redrive.JobDone:
			return j, nil
		case redrive.JobFailed, redrive.JobCancelled, redrive.JobStopped:
			return j, fmt.Errorf("redrive job %d ended %s: %s", j.ID, j.State, j.Error)
		}
	}
	return nil, errors.New("redrive job not done within 10 minutes")
}
