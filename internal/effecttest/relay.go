package effecttest

import (
	"context"
	"fmt"
	"testing"

	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/outbox"
)

// RelayAll runs r until its outbox is empty, failing the test when it
// does not drain. A row whose publish failed waits out its backoff on the
// relay's clock; the shared poll looks again until it is due.
func RelayAll(t *testing.T, r *outbox.Relay) {
	t.Helper()
	waittest.ForState(t, "the outbox to drain", func() (bool, string) {
		for { // every row that is due, batch after batch
			res, err := r.RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Published == 0 {
				break
			}
		}
		n, err := r.Pending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n == 0, fmt.Sprintf("%d rows pending", n)
	})
}
