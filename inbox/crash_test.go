package inbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

// The crash tests re-execute this test binary as a consumer child
// (effecttest.Main) that kills itself with SIGKILL right after its handler
// committed the effect and before the runtime acked the delivery. The
// children of this package consume from SQLite and RabbitMQ; the Kafka
// cases are in transport/kafka/inboxoutbox (the Kafka module).
func TestMain(m *testing.M) { effecttest.Main(m, openCrashTransport) }

// openCrashTransport opens a crash child's transport: SQLite (broker is
// the queue's file) or RabbitMQ (broker is the URL).
func openCrashTransport(ctx context.Context, qc lily.QueueConfig, broker string) (effecttest.Broker, error) {
	switch qc.Transport {
	case lily.TransportSQLite:
		s, err := sqlite.Open(ctx, broker, sqlite.Options{VisibilityTimeout: 5 * time.Second, PollInterval: 2 * time.Millisecond})
		if err != nil {
			return nil, err
		}
		return s, nil
	case lily.TransportRabbitMQ:
		r, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: broker, Logger: discard()})
		if err != nil {
			return nil, err
		}
		r.Register(qc.Spec())
		return r, nil
	}
	return nil, fmt.Errorf("crash child: transport %q", qc.Transport)
}

// discard is a logger nobody reads.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

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
			app, dsn := effecttest.App(t, kind, dir)
			queueDB := filepath.Join(dir, "queue.db")
			tr, err := sqlite.Open(ctx, queueDB, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			qc := effecttest.QueueConfig(lily.TransportSQLite, "crash.payments")
			receipts := lily.QueueConfig{Name: effecttest.ReceiptsQueue}.WithDefaults()
			if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec(), receipts.Spec()}}); err != nil {
				t.Fatal(err)
			}
			const n = 30
			msgs := make([]lily.Message, n)
			for i := range msgs {
				msgs[i] = lily.Message{Key: fmt.Sprintf("acct-%d", i%5), Body: fmt.Appendf(nil, "payment %d", i)}
			}
			if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(dir, "deliveries.log")
			kills := effecttest.KillLoop(t, 4*n, effecttest.ChildEnv{Transport: qc.Transport, Queue: qc.Name, Broker: queueDB,
				AppKind: kind, AppDSN: dsn, Log: logPath},
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
			effecttest.CheckExactlyOnce(t, app, logPath, kills, bodies, n, func(id string) bool { return ids[id] })
			cat, err := catalog.New(ctx, tr.DB())
			if err != nil {
				t.Fatal(err)
			}
			effecttest.CheckLedger(t, cat, tr, qc.Name, n)
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
