package nats_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// testAckWait is the lease of the tests' transports: short, so that the
// load suite's slow handlers outlast it and need InProgress.
const testAckWait = 2 * time.Second

func quietLogger() *slog.Logger {
	if os.Getenv("LILY_NATS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// transportLogger is the log of a test's transport: its warnings (a pull
// cut short, a give-back that failed) in the test's log, shown when the
// test fails; everything on stderr with LILY_NATS_TEST_LOG set.
func transportLogger(t testing.TB) *slog.Logger {
	if os.Getenv("LILY_NATS_TEST_LOG") != "" {
		return quietLogger()
	}
	return transporttest.Logger(t, slog.LevelWarn)
}

// open returns a transport on the test server, closed at the end of the
// test.
func open(t testing.TB, mod ...func(*nats.Options)) *nats.Transport {
	t.Helper()
	o := nats.Options{URL: natstest.URL(t), AckWait: testAckWait, MaxWait: time.Second, Logger: transportLogger(t)}
	for _, f := range mod {
		f(&o)
	}
	tr, err := nats.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// base unwraps a ledger-accounted transport.
func base(tr transport.Transport) *nats.Transport {
	if a, ok := tr.(*ledger.Accounted); ok {
		return a.Transport.(*nats.Transport)
	}
	return tr.(*nats.Transport)
}

func teardown(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
	return base(tr).DeleteQueue(ctx, spec)
}

func harness() transporttest.Harness {
	return transporttest.Harness{
		Name:  "nats",
		Lease: testAckWait,
		New:   func(t *testing.T) transport.Transport { return open(t) },
		DeadLetters: func(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
			ds, err := base(tr).PeekDeadLetters(ctx, queue, 0)
			return transporttest.DeadLettersOf(queue, ds, err)
		},
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := base(tr).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
		Teardown: teardown,
	}
}

// TestConformance runs the transport conformance suite on the NATS server.
func TestConformance(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, harness())
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers longer than AckWait, a hanging dependency, a graceful
// hand-over) on the NATS server.
func TestLoad(t *testing.T) {
	// Not parallel: the load behaviours count the process's goroutines.
	transporttest.RunLoad(t, harness())
}

// openAccounted returns a transport on the test server wrapped with
// ledger.Account (catalog parking) and its catalog, closed at the end of
// the test.
func openAccounted(t *testing.T) (transport.Transport, *catalog.Store) {
	t.Helper()
	cat := openCatalog(t)
	return ledger.Account(open(t), ledger.New(cat)), cat
}

// TestOrdering runs the park and block scenarios on the NATS server: an
// ordered queue's consumer has MaxAckPending 1, so the stream is handed
// out one message at a time, in order, across every instance.
func TestOrdering(t *testing.T) {
	t.Parallel()
	transporttest.RunOrdering(t, transporttest.OrderingHarness{Name: "nats", Open: openAccounted, Teardown: teardown})
}

// TestNatstestDefaultURL: natstest names the machine's server without
// importing this package; it must be the transport's default.
func TestNatstestDefaultURL(t *testing.T) {
	if natstest.DefaultURL != nats.DefaultURL {
		t.Errorf("natstest.DefaultURL %q, nats.DefaultURL %q: want them equal", natstest.DefaultURL, nats.DefaultURL)
	}
}
