package effecttest

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily/outbox"
)

// RelayAll runs r until its outbox is empty, failing the test when it
// does not drain.
func RelayAll(t *testing.T, r *outbox.Relay) {
	t.Helper()
	for range 1000 {
		res, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.Pending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if res.Published == 0 {
			time.Sleep(2 * time.Millisecond) // a row in backoff
		}
	}
	t.Fatal("the outbox did not drain")
}
