package sqs_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
	"github.com/lily-mq/lily/transport/transporttest"

	"github.com/lily-mq/lily/internal/testparallel"
)

// testLease is the visibility timeout of the tests' transports: SQS counts
// visibility in whole seconds, so 1s is the shortest lease there is.
const testLease = 3 * time.Second

func TestMain(m *testing.M) {
	if crashChild() {
		return
	}
	// Started before any test counts its goroutines.
	if _, err := sqstest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start the SQS emulator:", err)
		os.Exit(1)
	}
	// The tests wait on the broker far more than they compute (docs/testing.md).
	testparallel.Default(4)
	os.Exit(m.Run())
}

// emulator returns the process's goaws.
func emulator(t testing.TB) *sqstest.Emulator {
	t.Helper()
	e, err := sqstest.Start()
	if err != nil {
		t.Fatalf("start the SQS emulator: %v", err)
	}
	return e
}

// open returns a transport on the emulator, closed at the end of the test.
func open(t testing.TB, mod ...func(*sqs.Options)) *sqs.Transport {
	t.Helper()
	o := emulator(t).Options(testLease)
	for _, f := range mod {
		f(&o)
	}
	tr, err := sqs.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func harness() transporttest.Harness {
	return transporttest.Harness{
		Name: "sqs",
		New:  func(t *testing.T) transport.Transport { return open(t) },
		DeadLetters: func(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
			ds, err := tr.(*sqs.Transport).PeekDeadLetters(ctx, queue, 0)
			return transporttest.DeadLettersOf(queue, ds, err)
		},
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := tr.(*sqs.Transport).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
		Lease: testLease,
	}
}

// TestConformance runs the transport conformance suite on the emulator.
func TestConformance(t *testing.T) {
	transporttest.Run(t, harness())
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers, a hanging dependency, a graceful hand-over) on the emulator.
func TestLoad(t *testing.T) {
	transporttest.RunLoad(t, harness())
}
