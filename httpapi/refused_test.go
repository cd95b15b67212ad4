package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TestHealthSaysDLQFull (issue 30, item 2): a held entry that is in the
// catalog only because the broker refused its dead-letter copy (stored by
// ledger.Accounted, dl_key evidence.DLKeyRefusedPrefix…) makes /healthz
// degraded with "the DLQ is full: an operator must act", on both stores;
// once it is decided, the reason is gone.
func TestHealthSaysDLQFull(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, nil)
		ctx := context.Background()
		health := func() []string {
			t.Helper()
			var h healthJSON
			if code := f.call("GET", "/healthz", nil, nil, &h); code != http.StatusOK {
				t.Fatalf("healthz: %d %+v", code, h)
			}
			var out []string
			for _, r := range h.Reasons {
				if strings.Contains(r, "the DLQ is full") {
					out = append(out, r)
				}
			}
			return out
		}
		if r := health(); len(r) != 0 {
			t.Fatalf("healthz before any refusal: %q", r)
		}
		h := transport.Headers{evidence.HeaderReason: "permanent", evidence.HeaderErrorMessage: "boom",
			evidence.HeaderDLQRefused: "stored in the catalog only: the dead-letter queue orders.created.dlq.v2 is full"}
		e := catalog.NewEntry("orders.created", transport.Message{EventID: "refused-1", Body: []byte(`{"id":1}`)}, h, "permanent", time.Now())
		e.DLKey = evidence.DLKeyRefusedPrefix + "refused-1"
		if err := f.Catalog.Insert(ctx, e); err != nil {
			t.Fatal(err)
		}
		r := health()
		if len(r) != 1 || !strings.Contains(r[0], "queue orders.created: the DLQ is full: an operator must act") || !strings.Contains(r[0], " 1 held dead letters") {
			t.Fatalf("healthz with a refused dead letter held: %q", r)
		}
		if _, err := f.Catalog.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: []int64{e.ID}}, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		if r := health(); len(r) != 0 {
			t.Errorf("healthz once the refused entry was discarded: %q", r)
		}
	})
}
