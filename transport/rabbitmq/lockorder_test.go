package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// TestInFlightWhileReceiveOpens: counting what is in flight (reconcile,
// the catalog collector, a test's wait) while consumers open their
// channels must not deadlock. A Receive holds its consumer's lock while
// it opens a channel, which takes the transport's; the in-flight count
// used to take the transport's lock and then each consumer's — the other
// order (seen: an inbox test hung for ten minutes).
func TestInFlightWhileReceiveOpens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("lockorder", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tr.InFlight(ctx, qc.Name)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			// A new instance each time: its first Receive opens a channel.
			if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Consumer: fmt.Sprint("c", i)}); err != nil {
				t.Error(err)
				return
			}
			if err := tr.StopConsumer(ctx, &transport.StopParams{Queue: qc.Name, Consumer: fmt.Sprint("c", i)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("300 receives did not finish in 60s beside in-flight counts: a lock-order deadlock")
	}
	close(stop)
	wg.Wait()
}
