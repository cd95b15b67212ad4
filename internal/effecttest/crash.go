// Package effecttest is the harness that the tests of packages inbox and
// outbox share with their tests on Kafka (transport/kafka/inboxoutbox, in
// the Kafka module): an application database with the inbox, the outbox
// and an effects table; a consumer child process killed with SIGKILL
// between its commit and its ack, restarted as a supervisor would, over a
// transport the test binary opens (Opener); the checks that every effect
// applied exactly once and that the ledger balances; the twins scenario;
// and a relay run until the outbox is empty.
//
// It imports no broker client: each test binary plugs in the transports
// it tests, so that the root module's tests need no Kafka client.
package effecttest

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The crash tests re-execute their test binary as a consumer child that
// kills itself with SIGKILL right after its handler committed the effect
// and before the runtime acked the delivery. The child reads what to do
// from these variables (ChildEnv).
const (
	envChild     = "LILY_INBOX_CRASH_CHILD"     // "1" in the child
	envTransport = "LILY_INBOX_CRASH_TRANSPORT" // lily.TransportSQLite, TransportRabbitMQ or TransportKafka
	envQueue     = "LILY_INBOX_CRASH_QUEUE"
	envBroker    = "LILY_INBOX_CRASH_BROKER"   // SQLite: the queue's file; RabbitMQ: the URL; Kafka: the seed brokers
	envCatalog   = "LILY_INBOX_CRASH_CATALOG"  // the ledger of a broker transport (ledger.Account)
	envAppKind   = "LILY_INBOX_CRASH_APP_KIND" // "sqlite" or "postgres"
	envAppDSN    = "LILY_INBOX_CRASH_APP_DSN"
	envInstance  = "LILY_INBOX_CRASH_INSTANCE"
	envLog       = "LILY_INBOX_CRASH_LOG" // every delivery's event ID, and every kill
)

// ReceiptsQueue is where a child's effects announce themselves through
// the outbox: one receipt per payment.
const ReceiptsQueue = "crash.receipts"

// ChildEnv is what a consumer child consumes and where it applies and
// logs its effects.
type ChildEnv struct {
	// Transport is the queue's transport: lily.TransportSQLite,
	// TransportRabbitMQ or TransportKafka.
	Transport string
	// Queue is the queue consumed.
	Queue string
	// Broker is where the Opener finds the queue: SQLite's file, the
	// RabbitMQ URL, Kafka's seed brokers.
	Broker string
	// Catalog is the SQLite file of the catalog whose ledger counts a
	// broker's queue (ledger.Account). SQLite keeps its own ledger.
	Catalog string
	// AppKind ("sqlite" or "postgres") and AppDSN are the application
	// database (OpenApp).
	AppKind, AppDSN string
	// Log is the file every delivery and kill is logged to.
	Log string
}

func (e ChildEnv) environ() []string {
	return []string{envTransport + "=" + e.Transport, envQueue + "=" + e.Queue, envBroker + "=" + e.Broker, envCatalog + "=" + e.Catalog,
		envAppKind + "=" + e.AppKind, envAppDSN + "=" + e.AppDSN, envLog + "=" + e.Log}
}

// Broker is a transport that counts what its queues hold in flight.
type Broker interface {
	transport.Transport
	transport.InFlightCounter
}

// Opener opens the transport of qc in a child process, reached at broker
// (ChildEnv.Broker), with qc registered; the parent declared its topology.
type Opener func(ctx context.Context, qc lily.QueueConfig, broker string) (Broker, error)

// Main is a crash test binary's TestMain: in a child started by KillLoop
// it consumes through open and exits; otherwise it runs the tests.
func Main(m *testing.M, open Opener) {
	if os.Getenv(envChild) == "1" {
		os.Exit(child(open))
	}
	os.Exit(m.Run())
}

// QueueConfig is the crash tests' queue name on transportName: one retry,
// a 5 ms backoff, and a delivery limit no kill loop reaches.
func QueueConfig(transportName, name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: transportName, RetryAttempts: 1, RetryBackoffMillis: new(int64(5)),
		DeliveryLimit: new(50)}.WithDefaults()
}

// Killer selects the messages that kill the process right after the
// commit that applied them: every third body. Each such message applies
// once, so it kills once; its redelivery finds the mark. (By body, not by
// event ID: a message whose ID changed on its redelivery would apply, and
// kill, again.)
func Killer(body []byte) bool {
	h := fnv.New32a()
	h.Write(body)
	return h.Sum32()%3 == 0
}

// OpenApp opens an application database: kind "postgres" (dsn a URL) or
// "sqlite" (dsn a file).
func OpenApp(kind, dsn string) (*sql.DB, error) {
	if kind == "postgres" {
		return sql.Open("pgx", dsn)
	}
	return sqlitedb.Open(context.Background(), dsn, sqlitedb.Options{})
}

// App opens the application database of a crash test (SQLite in dir, or
// a PostgreSQL schema of its own) with the inbox, the outbox and the
// effects table: one row per applied effect, not idempotent by itself.
func App(t *testing.T, kind, dir string) (app *sql.DB, dsn string) {
	t.Helper()
	ctx := context.Background()
	dsn = filepath.Join(dir, "app.db")
	if kind == "postgres" {
		dsn = pgtest.URL(t)
	}
	app, err := OpenApp(kind, dsn)
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

// side is what a child consumes from: the transport its consumer uses,
// the counter it waits on, and what to close.
type side struct {
	consumed transport.Transport
	inflight transport.InFlightCounter
	close    func()
}

// openSide opens the child's transport for qc through open: SQLite as it
// is, or a broker's counted into the catalog's ledger (ledger.Account),
// as a runtime fed by other services' producers runs.
func openSide(ctx context.Context, open Opener, qc lily.QueueConfig) (side, error) {
	tr, err := open(ctx, qc, os.Getenv(envBroker))
	if err != nil {
		return side{}, err
	}
	if qc.Transport == lily.TransportSQLite {
		return side{consumed: tr, inflight: tr, close: func() { tr.Close() }}, nil
	}
	cat, err := catalog.Open(ctx, os.Getenv(envCatalog))
	if err != nil {
		tr.Close()
		return side{}, err
	}
	return side{consumed: ledger.Account(tr, ledger.New(cat)), inflight: tr, close: func() { tr.Close(); cat.Close() }}, nil
}

// child consumes until the queue is quiet (exit 0) or kills itself after
// a commit. It logs every delivery (body, event ID, delivery count,
// applied) before its commit, and every kill.
func child(open Opener) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qc := QueueConfig(os.Getenv(envTransport), os.Getenv(envQueue))
	s, err := openSide(ctx, open, qc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.close()
	app, err := OpenApp(os.Getenv(envAppKind), os.Getenv(envAppDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer app.Close()
	logf, err := os.OpenFile(os.Getenv(envLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
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
			return outbox.Add(ctx, tx, outbox.Message{Queue: ReceiptsQueue, Message: lily.Message{Key: d.Key, Body: d.Body}})
		})
		if err != nil {
			return err
		}
		logLine("delivery\t%x\t%s\t%d\t%t\n", d.Body, d.EventID, d.DeliveryCount, applied)
		if err := tx.Commit(); err != nil {
			return err
		}
		if applied && Killer(d.Body) {
			logLine("kill\t%x\t%s\n", d.Body, d.EventID)
			syscall.Kill(os.Getpid(), syscall.SIGKILL) // committed, not acked
			select {}
		}
		return nil
	})
	c, err := lily.NewConsumer(s.consumed, handler, lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 16,
		ReceiveWait: 10 * time.Millisecond, Instance: os.Getenv(envInstance), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	go transporttest.CancelWhenIdle(ctx, s.inflight, qc.Name, 30*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// KillLoop runs consumer children (the test binary, through Main) with
// env, restarting each one killed with SIGKILL as a supervisor would,
// until one ends on its own; it returns the number of kills. instance
// names each run's consumer instance; recoverLeases, when set, gives a
// dead instance's leases back.
func KillLoop(t *testing.T, maxRuns int, env ChildEnv, instance func(run int) string, recoverLeases func(instance string)) (kills int) {
	t.Helper()
	for run := 0; ; run++ {
		if run > maxRuns {
			t.Fatalf("the consumer was still dying after %d runs", run)
		}
		cmd := osexec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env.environ()...), envChild+"=1", envInstance+"="+instance(run))
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
