package pubsub_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/transporttest"
)

const project = "lily-test"

// newServer starts an in-process Pub/Sub fake (pstest), closed at the end
// of the test.
func newServer(t testing.TB) *pstest.Server {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	return srv
}

func quietLogger() *slog.Logger {
	if os.Getenv("LILY_PUBSUB_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testOptions are options fit for tests on pstest at addr: a 2 s ack
// deadline (the lease), fast polling.
func testOptions(addr string) pubsub.Options {
	return pubsub.Options{Project: project, Endpoint: addr, Insecure: true, AckDeadline: 2 * time.Second,
		PollInterval: 10 * time.Millisecond, RPCTimeout: 20 * time.Second, Logger: quietLogger()}
}

// withCount makes the transport count in-flight messages from srv.
func withCount(srv *pstest.Server) func(*pubsub.Options) {
	return func(o *pubsub.Options) { o.InFlight = pstestCount(srv) }
}

// open connects a transport to srv, closed at the end of the test.
func open(t testing.TB, srv *pstest.Server, mod ...func(*pubsub.Options)) *pubsub.Transport {
	t.Helper()
	o := testOptions(srv.Addr)
	for _, f := range mod {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := pubsub.Open(ctx, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// inFlight counts the queue's messages not acknowledged in pstest: those
// of its main, retry-return and delay topics (not its dead-letter topic).
func inFlight(srv *pstest.Server, tr *pubsub.Transport, queue string) int64 {
	return countInFlight(srv, tr.Names(queue))
}

// pstestCount is an Options.InFlight that counts from pstest's records.
func pstestCount(srv *pstest.Server) func(context.Context, string, pubsub.QueueNames) (int64, error) {
	return func(_ context.Context, _ string, n pubsub.QueueNames) (int64, error) {
		return countInFlight(srv, n), nil
	}
}

// pstestMu serializes reads of pstest's records: Server.Messages refreshes
// the Acks of the same *Message values it returned before, so a caller
// reading them while another calls Messages races.
var pstestMu sync.Mutex

func countInFlight(srv *pstest.Server, n pubsub.QueueNames) int64 {
	pstestMu.Lock()
	defer pstestMu.Unlock()
	prefix := "projects/" + project + "/topics/"
	var c int64
	for _, m := range srv.Messages() {
		topic := strings.TrimPrefix(m.Topic, prefix)
		mine := topic == n.Topic || topic == pubsub.ReturnTopic(n.Subscription) ||
			strings.HasPrefix(topic, n.Subscription+".retry.")
		if mine && m.Acks == 0 {
			c++
		}
	}
	return c
}

func harness(srv *pstest.Server) transporttest.Harness {
	return transporttest.Harness{
		Name:  "pubsub",
		Lease: 2 * time.Second,
		New:   func(t *testing.T) transport.Transport { return open(t, srv) },
		DeadLetters: func(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
			ds, err := tr.(*pubsub.Transport).DeadLetters(ctx, queue)
			return transporttest.DeadLettersOf(queue, ds, err)
		},
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := tr.(*pubsub.Transport).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*pubsub.Transport).DeleteQueue(ctx, spec)
		},
		InFlight: func(_ context.Context, tr transport.Transport, queue string) (int64, error) {
			return inFlight(srv, tr.(*pubsub.Transport), queue), nil
		},
	}
}

// TestConformance runs the transport conformance suite on pstest.
func TestConformance(t *testing.T) {
	transporttest.Run(t, harness(newServer(t)))
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers longer than the ack deadline, a hanging dependency, a
// dead-lettered probe, a graceful hand-over) on pstest.
func TestLoad(t *testing.T) {
	transporttest.RunLoad(t, harness(newServer(t)))
}
