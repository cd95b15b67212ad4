package azqueue_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/testparallel"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// testLease is the visibility timeout of the tests' transports: the
// service counts visibility in whole seconds, and Azurite (one Node.js
// process) answers slowly when the machine is busy: with 3 s, a batch of
// lease extensions that took 2.3 s under a loaded CI run came too late and
// four competing consumers handled 14 of 200 messages twice.
const testLease = 5 * time.Second

func TestMain(m *testing.M) {
	if crashChild() {
		return
	}
	// The tests wait on the service far more than they compute (docs/testing.md).
	testparallel.Default(4)
	os.Exit(m.Run())
}

// open returns a transport on the test Azurite, closed at the end of the test.
func open(t testing.TB, mod ...func(*azqueue.Options)) *azqueue.Transport {
	t.Helper()
	o := azuritetest.Options(t, testLease)
	for _, f := range mod {
		f(&o)
	}
	tr, err := azqueue.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func harness() transporttest.Harness {
	return transporttest.Harness{
		Name: "azqueue",
		New:  func(t *testing.T) transport.Transport { return open(t) },
		DeadLetters: func(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
			ds, err := tr.(*azqueue.Transport).PeekDeadLetters(ctx, queue, 0)
			return transporttest.DeadLettersOf(queue, ds, err)
		},
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := tr.(*azqueue.Transport).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*azqueue.Transport).DeleteQueues(ctx, spec.Name)
		},
		Lease: testLease,
	}
}

// TestConformance runs the transport conformance suite on Azurite.
func TestConformance(t *testing.T) {
	transporttest.Run(t, harness())
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers, a hanging dependency, a graceful hand-over) on Azurite.
func TestLoad(t *testing.T) {
	transporttest.RunLoad(t, harness())
}
