package lily_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// TestPublishSchemaVersion: lily.Publish writes Message.SchemaVersion as
// x-lily-schema-version (int32); the handler sees it; a dead letter keeps
// it, and the catalog stores and groups by it. The ledger balances.
func TestPublishSchemaVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	q := lily.QueueConfig{Name: "orders.created"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	caller := lily.Headers{"tenant": "acme"}
	msgs := []lily.Message{
		{EventID: "v3", Body: []byte("old"), SchemaVersion: 3, Headers: caller},
		{EventID: "v4", Body: []byte("new"), SchemaVersion: 4},
		{EventID: "none", Body: []byte("plain")},
	}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	if _, ok := caller[evidence.HeaderSchemaVersion]; ok {
		t.Error("Publish changed the caller's header map")
	}
	// Refusals: a header that disagrees, a version out of range.
	for _, bad := range []lily.Message{
		{Body: []byte("x"), SchemaVersion: 4, Headers: lily.Headers{evidence.HeaderSchemaVersion: "3"}},
		{Body: []byte("x"), SchemaVersion: -2},
	} {
		if err := lily.Publish(ctx, tr, q.Name, []lily.Message{bad}); err == nil || !strings.Contains(err.Error(), "SchemaVersion") {
			t.Errorf("Publish(%+v): %v, want a refusal naming SchemaVersion", bad, err)
		}
	}
	seen := map[string]int{}
	var settled atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		seen[d.EventID] = d.SchemaVersion
		if d.Headers[evidence.HeaderSchemaVersion] != nil && d.Headers[evidence.HeaderSchemaVersion] != int32(d.SchemaVersion) {
			t.Errorf("%s: header %#v, want int32(%d)", d.EventID, d.Headers[evidence.HeaderSchemaVersion], d.SchemaVersion)
		}
		if d.SchemaVersion == 3 {
			return lily.Permanent(errors.New("schema 3 is no longer read"))
		}
		return nil
	}), lily.ConsumerOptions{Queue: q, Concurrency: 1, Logger: slog.New(slog.DiscardHandler),
		Hooks: []lily.Hook{lily.HookFunc(func(_ context.Context, e lily.Event) {
			if (e.Kind == lily.EventAcked || e.Kind == lily.EventDeadLettered) && settled.Add(1) == 3 {
				stop()
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if seen["v3"] != 3 || seen["v4"] != 4 || seen["none"] != 0 {
		t.Errorf("Delivery.SchemaVersion %v, want v3:3 v4:4 none:0", seen)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	groups, err := cat.Group(ctx, "schema_version", catalog.Filter{Queue: q.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Key != "3" || groups[0].Count != 1 {
		t.Errorf("groups by schema_version %+v, want one entry of version 3", groups)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Lost != 0 || r.Accepted != 3 || r.Acked != 2 || r.DeadLettered != 1 {
			t.Errorf("ledger %+v, want accepted 3 = acked 2 + dead-lettered 1, lost 0", r)
		}
	}
}
