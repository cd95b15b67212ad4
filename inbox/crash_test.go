package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
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
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The crash test re-executes this test binary as a consumer child that
// kills itself with SIGKILL right after its handler committed the effect
// and before the runtime acked the delivery.
const (
	crashChild    = "LILY_INBOX_CRASH_CHILD" // "1" in the child
	crashQueueDB  = "LILY_INBOX_CRASH_QUEUE_DB"
	crashAppKind  = "LILY_INBOX_CRASH_APP_KIND" // "sqlite" or "postgres"
	crashAppDSN   = "LILY_INBOX_CRASH_APP_DSN"
	crashInstance = "LILY_INBOX_CRASH_INSTANCE"
	crashQ        = "crash.payments"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChild) == "1" {
		os.Exit(crashConsumer())
	}
	os.Exit(m.Run())
}

func crashQueueConfig() lily.QueueConfig {
	return lily.QueueConfig{Name: crashQ, RetryAttempts: 1, RetryBackoffMillis: new(int64(5)), DeliveryLimit: new(50)}.WithDefaults()
}

// killer selects the events that kill the process right after the
// commit that applied them: every third event. Each such event applies
// once, so it kills once; its redelivery finds the mark.
func killer(eventID string) bool {
	h := fnv.New32a()
	h.Write([]byte(eventID))
	return h.Sum32()%3 == 0
}

func openApp(kind, dsn string) (*sql.DB, error) {
	if kind == "postgres" {
		return sql.Open("pgx", dsn)
	}
	return sqlitedb.Open(context.Background(), dsn, sqlitedb.Options{})
}

// crashConsumer consumes until the queue is quiet (exit 0) or kills
// itself after a commit.
func crashConsumer() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := sqlite.Open(ctx, os.Getenv(crashQueueDB), sqlite.Options{VisibilityTimeout: 5 * time.Second, PollInterval: 2 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	app, err := openApp(os.Getenv(crashAppKind), os.Getenv(crashAppDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer app.Close()
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		applied, err := inbox.Apply(ctx, tx, d, func() error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id, amount) VALUES ($1, 1)`, d.EventID); err != nil {
				return err
			}
			// The effect announces itself through the outbox, in the same
			// transaction: one receipt per payment, never two.
			return outbox.Add(ctx, tx, outbox.Message{Queue: "crash.receipts", Message: lily.Message{Key: d.Key, Body: d.Body}})
		})
		if err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if applied && killer(d.EventID) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL) // committed, not acked
			select {}
		}
		return nil
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: crashQueueConfig(), Concurrency: 4, Prefetch: 16,
		ReceiveWait: 10 * time.Millisecond, Instance: os.Getenv(crashInstance), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	go transporttest.CancelWhenIdle(ctx, tr, crashQ, 30*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// TestKill9BetweenCommitAndAck: a consumer whose handler commits its
// effect (and an outbox row) through the inbox, and is then killed with
// SIGKILL before the ack — again and again, restarted each time as a
// supervisor would — applies every effect exactly once, on a SQLite and a
// PostgreSQL application database; the ledger balances and the relay
// publishes exactly one receipt per payment.
func TestKill9BetweenCommitAndAck(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			dsn := filepath.Join(dir, "app.db")
			if kind == "postgres" {
				dsn = pgtest.URL(t)
			}
			app, err := openApp(kind, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			if err := inbox.Migrate(ctx, app); err != nil {
				t.Fatal(err)
			}
			if err := outbox.Migrate(ctx, app); err != nil {
				t.Fatal(err)
			}
			if _, err := app.Exec(`CREATE TABLE effects (event_id TEXT NOT NULL, amount BIGINT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			queueDB := filepath.Join(dir, "queue.db")
			tr, err := sqlite.Open(ctx, queueDB, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			qc := crashQueueConfig()
			receipts := lily.QueueConfig{Name: "crash.receipts"}.WithDefaults()
			if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec(), receipts.Spec()}}); err != nil {
				t.Fatal(err)
			}
			const n = 60
			msgs := make([]lily.Message, n)
			killers := 0
			for i := range msgs {
				msgs[i] = lily.Message{Key: fmt.Sprintf("acct-%d", i%5), Body: fmt.Appendf(nil, "payment %d", i)}
			}
			if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if killer(m.EventID) {
					killers++
				}
			}
			kills := 0
			for run := 0; ; run++ {
				if run > 4*n {
					t.Fatalf("the consumer was still dying after %d runs", run)
				}
				instance := fmt.Sprintf("crash-%s-%d", kind, run)
				cmd := osexec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), crashChild+"=1", crashQueueDB+"="+queueDB, crashAppKind+"="+kind,
					crashAppDSN+"="+dsn, crashInstance+"="+instance)
				cmd.Stderr = os.Stderr
				err := cmd.Run()
				if err == nil {
					break
				}
				ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("run %d: consumer failed: %v", run, err)
				}
				kills++
				// The supervisor gives the dead instance's leases back.
				if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: instance}); err != nil {
					t.Fatal(err)
				}
			}
			// Each selected event kills at most once, after the commit that
			// applied it (fewer when two commit at once and one kill takes
			// both processes' handlers down).
			if kills == 0 || kills > killers {
				t.Fatalf("%d kills, want 1..%d (one per selected event at most)", kills, killers)
			}
			var total, distinct int
			if err := app.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id) FROM effects`).Scan(&total, &distinct); err != nil {
				t.Fatal(err)
			}
			if total != n || distinct != n {
				t.Fatalf("effects %d (%d distinct), want %d exactly once each", total, distinct, n)
			}
			cat, err := catalog.New(ctx, tr.DB())
			if err != nil {
				t.Fatal(err)
			}
			rows, err := cat.Ledger(ctx, tr)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Queue == qc.Name && (r.Lost != 0 || r.InFlight != 0 || r.Accepted != n || r.Acked != n) {
					t.Fatalf("ledger %+v: want %d accepted and acked, none lost", r, n)
				}
			}
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
