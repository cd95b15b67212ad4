package inbox_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The crash tests re-execute this test binary as a consumer child that
// kills itself with SIGKILL right after its handler committed the effect
// and before the runtime acked the delivery.
const (
	crashChild     = "LILY_INBOX_CRASH_CHILD"     // "1" in the child
	crashTransport = "LILY_INBOX_CRASH_TRANSPORT" // lily.TransportSQLite (default), TransportRabbitMQ or TransportKafka
	crashQueue     = "LILY_INBOX_CRASH_QUEUE"
	crashBroker    = "LILY_INBOX_CRASH_BROKER"   // SQLite: the queue's file; RabbitMQ: the URL; Kafka: the seed brokers
	crashCatalog   = "LILY_INBOX_CRASH_CATALOG"  // the ledger of a broker transport (catalog.Account)
	crashAppKind   = "LILY_INBOX_CRASH_APP_KIND" // "sqlite" or "postgres"
	crashAppDSN    = "LILY_INBOX_CRASH_APP_DSN"
	crashInstance  = "LILY_INBOX_CRASH_INSTANCE"
	crashLog       = "LILY_INBOX_CRASH_LOG" // every delivery's event ID, and every kill
	crashQ         = "crash.payments"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChild) == "1" {
		os.Exit(crashConsumer())
	}
	os.Exit(m.Run())
}

func crashQueueConfig(transportName, name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: transportName, RetryAttempts: 1, RetryBackoffMillis: new(int64(5)),
		DeliveryLimit: new(50)}.WithDefaults()
}

// killer selects the messages that kill the process right after the
// commit that applied them: every third body. Each such message applies
// once, so it kills once; its redelivery finds the mark. (By body, not by
// event ID: a message whose ID changed on its redelivery would apply, and
// kill, again.)
func killer(body []byte) bool {
	h := fnv.New32a()
	h.Write(body)
	return h.Sum32()%3 == 0
}

func openApp(kind, dsn string) (*sql.DB, error) {
	if kind == "postgres" {
		return sql.Open("pgx", dsn)
	}
	return sqlitedb.Open(context.Background(), dsn, sqlitedb.Options{})
}

// crashApp opens the application database of a crash test (SQLite in dir,
// or a PostgreSQL schema of its own) with the inbox, the outbox and the
// effects table: one row per applied effect, not idempotent by itself.
func crashApp(t *testing.T, kind, dir string) (app *sql.DB, dsn string) {
	t.Helper()
	ctx := context.Background()
	dsn = filepath.Join(dir, "app.db")
	if kind == "postgres" {
		dsn = pgtest.URL(t)
	}
	app, err := openApp(kind, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	if err := inbox.Migrate(ctx, app); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Migrate(ctx, app); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(`CREATE TABLE effects (event_id TEXT NOT NULL, body TEXT NOT NULL, amount BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return app, dsn
}

// amount is what a payment's effect adds: its x-amount header — an AMQP
// decimal's unscaled value, or a Kafka header's 4 bytes, big-endian, as a
// foreign producer writes them — or 1 without one.
func amount(d *lily.Delivery) (int64, error) {
	switch v := d.Headers["x-amount"].(type) {
	case nil:
		return 1, nil
	case transport.Decimal:
		return int64(v.Value), nil
	case []byte:
		if len(v) == 4 {
			return int64(binary.BigEndian.Uint32(v)), nil
		}
	case string:
		if len(v) == 4 {
			return int64(binary.BigEndian.Uint32([]byte(v))), nil
		}
	}
	return 0, fmt.Errorf("x-amount header %T %v: want an AMQP decimal or 4 bytes", d.Headers["x-amount"], d.Headers["x-amount"])
}

// crashSide is what a child consumes from: the transport its consumer
// uses, the counter it waits on, and what to close.
type crashSide struct {
	consumed transport.Transport
	inflight transport.InFlightCounter
	close    func()
}

// openCrashSide opens the child's transport for qc: SQLite, or a broker's
// counted into the catalog's ledger (catalog.Account), as a runtime fed by
// other services' producers runs.
func openCrashSide(ctx context.Context, qc lily.QueueConfig) (crashSide, error) {
	broker := os.Getenv(crashBroker)
	var tr interface {
		transport.Transport
		transport.InFlightCounter
	}
	switch qc.Transport {
	case lily.TransportSQLite:
		s, err := sqlite.Open(ctx, broker, sqlite.Options{VisibilityTimeout: 5 * time.Second, PollInterval: 2 * time.Millisecond})
		if err != nil {
			return crashSide{}, err
		}
		return crashSide{consumed: s, inflight: s, close: func() { s.Close() }}, nil
	case lily.TransportRabbitMQ:
		r, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: broker, Logger: discard()})
		if err != nil {
			return crashSide{}, err
		}
		r.Register(qc.Spec())
		tr = r
	case lily.TransportKafka:
		k, err := kafka.Open(ctx, kafkaTestOptions(kafka.ParseBrokers(broker)))
		if err != nil {
			return crashSide{}, err
		}
		k.Register(qc.Spec())
		tr = k
	default:
		return crashSide{}, fmt.Errorf("crash child: transport %q", qc.Transport)
	}
	cat, err := catalog.Open(ctx, os.Getenv(crashCatalog))
	if err != nil {
		tr.Close()
		return crashSide{}, err
	}
	return crashSide{consumed: catalog.Account(tr, cat), inflight: tr, close: func() { tr.Close(); cat.Close() }}, nil
}

// kafkaTestOptions are the Kafka transport's options on kfake, with
// timings fit for tests; a static member takes its partitions back at
// once when it is restarted.
func kafkaTestOptions(brokers []string) kafka.Options {
	return kafka.Options{Brokers: brokers, Partitions: 3, StaticMembership: true,
		SessionTimeout: 3 * time.Second, RebalanceTimeout: 5 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RevokeTimeout: 2 * time.Second, ProduceTimeout: 10 * time.Second, MetadataMaxAge: time.Second,
		Logger: discard()}
}

// crashConsumer consumes until the queue is quiet (exit 0) or kills
// itself after a commit. It logs every delivery (body, event ID, delivery
// count, applied) before its commit, and every kill.
func crashConsumer() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qc := crashQueueConfig(cmp.Or(os.Getenv(crashTransport), lily.TransportSQLite), cmp.Or(os.Getenv(crashQueue), crashQ))
	side, err := openCrashSide(ctx, qc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer side.close()
	app, err := openApp(os.Getenv(crashAppKind), os.Getenv(crashAppDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer app.Close()
	logf, err := os.OpenFile(os.Getenv(crashLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	var logMu sync.Mutex
	logLine := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logf, format, args...) // one write: a SIGKILL loses nothing written
	}
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		amt, err := amount(d)
		if err != nil {
			return lily.Permanent(err)
		}
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		applied, err := inbox.Apply(ctx, tx, d, func() error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id, body, amount) VALUES ($1, $2, $3)`, d.EventID, string(d.Body), amt); err != nil {
				return err
			}
			// The effect announces itself through the outbox, in the same
			// transaction: one receipt per payment, never two.
			return outbox.Add(ctx, tx, outbox.Message{Queue: "crash.receipts", Message: lily.Message{Key: d.Key, Body: d.Body}})
		})
		if err != nil {
			return err
		}
		logLine("delivery\t%x\t%s\t%d\t%t\n", d.Body, d.EventID, d.DeliveryCount, applied)
		if err := tx.Commit(); err != nil {
			return err
		}
		if applied && killer(d.Body) {
			logLine("kill\t%x\t%s\n", d.Body, d.EventID)
			syscall.Kill(os.Getpid(), syscall.SIGKILL) // committed, not acked
			select {}
		}
		return nil
	})
	c, err := lily.NewConsumer(side.consumed, handler, lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 16,
		ReceiveWait: 10 * time.Millisecond, Instance: os.Getenv(crashInstance), Logger: discard()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	go transporttest.CancelWhenIdle(ctx, side.inflight, qc.Name, 30*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// discard is a logger nobody reads.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// killLoop runs consumer children with env, restarting each one killed
// with SIGKILL as a supervisor would, until one ends on its own; it
// returns the number of kills. instance names each run's consumer
// instance; recoverLeases, when set, gives a dead instance's leases back.
func killLoop(t *testing.T, maxRuns int, env []string, instance func(run int) string, recoverLeases func(instance string)) (kills int) {
	t.Helper()
	for run := 0; ; run++ {
		if run > maxRuns {
			t.Fatalf("the consumer was still dying after %d runs", run)
		}
		cmd := osexec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env...), crashChild+"=1", crashInstance+"="+instance(run))
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		if err == nil {
			return kills
		}
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: consumer failed: %v", run, err)
		}
		kills++
		if recoverLeases != nil {
			recoverLeases(instance(run))
		}
	}
}

// TestKill9BetweenCommitAndAck: a consumer whose handler commits its
// effect (and an outbox row) through the inbox, and is then killed with
// SIGKILL before the ack — again and again, restarted each time as a
// supervisor would — applies every effect exactly once, on a SQLite and a
// PostgreSQL application database; every redelivery after a kill carries
// the event ID of the delivery that applied it; the ledger balances and
// the relay publishes exactly one receipt per payment.
func TestKill9BetweenCommitAndAck(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			app, dsn := crashApp(t, kind, dir)
			queueDB := filepath.Join(dir, "queue.db")
			tr, err := sqlite.Open(ctx, queueDB, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			qc := crashQueueConfig(lily.TransportSQLite, crashQ)
			receipts := lily.QueueConfig{Name: "crash.receipts"}.WithDefaults()
			if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec(), receipts.Spec()}}); err != nil {
				t.Fatal(err)
			}
			const n = 60
			msgs := make([]lily.Message, n)
			for i := range msgs {
				msgs[i] = lily.Message{Key: fmt.Sprintf("acct-%d", i%5), Body: fmt.Appendf(nil, "payment %d", i)}
			}
			if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(dir, "deliveries.log")
			kills := killLoop(t, 4*n, []string{crashBroker + "=" + queueDB, crashAppKind + "=" + kind, crashAppDSN + "=" + dsn, crashLog + "=" + logPath},
				func(run int) string { return fmt.Sprintf("crash-%s-%d", kind, run) },
				func(instance string) {
					if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: instance}); err != nil {
						t.Fatal(err)
					}
				})
			ids := map[string]bool{}
			bodies := make([][]byte, n)
			for i, m := range msgs {
				ids[m.EventID], bodies[i] = true, m.Body
			}
			checkExactlyOnce(t, app, logPath, kills, bodies, n, func(id string) bool { return ids[id] })
			cat, err := catalog.New(ctx, tr.DB())
			if err != nil {
				t.Fatal(err)
			}
			checkLedger(t, cat, tr, qc.Name, n)
			relay, err := outbox.NewRelay(app, tr, outbox.RelayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for {
				res, err := relay.RunOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if res.Published == 0 {
					break
				}
			}
			depth := 0
			for {
				ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: receipts.Name, Max: 100, Consumer: "check"})
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) == 0 {
					break
				}
				var ss []transport.Settlement
				for _, d := range ds {
					ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
				}
				if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
					t.Fatal(err)
				}
				depth += len(ds)
			}
			if depth != n {
				t.Fatalf("%d receipts published, want %d (one per payment)", depth, n)
			}
			t.Logf("%s: %d payments, %d kills between commit and ack, every effect and receipt exactly once", kind, n, kills)
		})
	}
}

// checkExactlyOnce checks a kill loop's outcome: kills in 1..the number of
// killer bodies (each kills at most once, after the commit that applied
// it; fewer when two commit at once and one kill takes both down); one
// effect per body — the bodies sent, each once, amounts summing to
// wantAmount — and one outbox row per effect; and, from the children's
// delivery log, one event ID per body, of the expected form (idOK), the
// same on every delivery: in particular every body killed after its commit
// came back with that ID and was found applied.
func checkExactlyOnce(t *testing.T, app *sql.DB, logPath string, kills int, bodies [][]byte, wantAmount int64, idOK func(string) bool) {
	t.Helper()
	n := len(bodies)
	killers := 0
	for _, b := range bodies {
		if killer(b) {
			killers++
		}
	}
	if kills == 0 || kills > killers {
		t.Fatalf("%d kills, want 1..%d (one per selected message at most)", kills, killers)
	}
	var total, distinctIDs, distinctBodies int
	var sum int64
	if err := app.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id), COUNT(DISTINCT body), CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM effects`).
		Scan(&total, &distinctIDs, &distinctBodies, &sum); err != nil {
		t.Fatal(err)
	}
	if total != n || distinctIDs != n || distinctBodies != n || sum != wantAmount {
		t.Fatalf("effects %d (%d event IDs, %d bodies, amount %d), want %d exactly once each (amount %d)",
			total, distinctIDs, distinctBodies, sum, n, wantAmount)
	}
	for _, b := range bodies {
		var c int
		if err := app.QueryRow(`SELECT COUNT(*) FROM effects WHERE body = $1`, string(b)).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if c != 1 {
			t.Fatalf("body %q applied %d times, want once", b, c)
		}
	}
	var receipts int
	if err := app.QueryRow(`SELECT COUNT(*) FROM lily_outbox`).Scan(&receipts); err != nil {
		t.Fatal(err)
	}
	if receipts != n {
		t.Fatalf("%d outbox rows, want %d (one per effect)", receipts, n)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	idOf := map[string]string{}      // body → the event ID of its deliveries
	killedAt := map[string]int{}     // body → its kill's line
	redelivered := map[string]bool{} // killed body → found applied after its kill
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "\t")
		switch {
		case len(f) == 3 && f[0] == "kill":
			killedAt[f[1]] = i
		case len(f) == 5 && f[0] == "delivery":
			body, id, applied := f[1], f[2], f[4] == "true"
			if prev, ok := idOf[body]; ok && prev != id {
				t.Fatalf("body %s delivered with event ID %s, earlier with %s: the ID changed", body, id, prev)
			}
			idOf[body] = id
			if _, killed := killedAt[body]; killed && !applied {
				redelivered[body] = true
			}
		default:
			t.Fatalf("delivery log line %d: %q", i+1, line)
		}
	}
	seen := map[string]bool{}
	for body, id := range idOf {
		if !idOK(id) || seen[id] {
			t.Fatalf("body %s has event ID %q: not of the expected form, or shared", body, id)
		}
		seen[id] = true
	}
	if len(idOf) != n {
		t.Fatalf("%d bodies delivered, want %d", len(idOf), n)
	}
	if len(killedAt) < kills {
		t.Fatalf("%d kills logged, %d happened", len(killedAt), kills)
	}
	for body := range killedAt {
		if !redelivered[body] {
			t.Fatalf("body %s was killed after its commit and never came back found applied under ID %s", body, idOf[body])
		}
	}
	t.Logf("%d messages, %d kills; %d killed messages redelivered with their first event ID and found applied; %d effects",
		n, kills, len(redelivered), total)
}

// checkLedger checks queue's row of cat's ledger, with in-flight counted
// by inflight: n accepted, n acked, nothing dead-lettered, in flight or
// lost.
func checkLedger(t *testing.T, cat *catalog.Store, inflight transport.InFlightCounter, queue string, n int64) {
	t.Helper()
	rows, err := cat.Ledger(context.Background(), inflight)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue != queue {
			continue
		}
		if r.Lost != 0 || r.InFlight != 0 || r.DeadLettered != 0 || r.Accepted != n || r.Acked != n {
			t.Fatalf("ledger %+v: want %d accepted and acked, none lost", r, n)
		}
		t.Logf("ledger of %s: accepted %d = acked %d, lost %d", queue, r.Accepted, r.Acked, r.Lost)
		return
	}
	t.Fatalf("no ledger row for %s: %+v", queue, rows)
}
