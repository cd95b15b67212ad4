package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOversizedDeadLetterStoredInCatalog (issue 30, item 2, on Pub/Sub):
// the service takes at most 100 attributes on a message; a producer's
// message with 99 of its own (and Lily's event ID: 100) is valid, but its
// dead-letter copy cannot carry the evidence even trimmed. Before, the
// hand-off failed, the original stayed unacknowledged and its handler ran
// again on every redelivery (until the dead-letter policy forwarded it as
// delivery_limit, the real error lost). Through ledger.Accounted the dead
// letter is now stored in the catalog — the original bytes, the producer's
// attributes, the handler's error, x-lily-dlq-refused naming the limit —
// and the original acknowledged: its handler runs once, the healthy
// messages behind it (prefetch 1) are handled, nothing stays in flight and
// the ledger balances. (pstest enforces no limit; Lily checks them before
// publishing, as the transport always has.)
func TestOversizedDeadLetterStoredInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	tr := open(t, srv, withCount(srv))
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	qc := lily.QueueConfig{Name: fmt.Sprintf("refused.%08x", rand.Uint32()), Transport: lily.TransportPubSub}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	h := transport.Headers{}
	for i := range pubsub.MaxAttributes - 1 {
		h[fmt.Sprintf("attr-%02d", i)] = fmt.Sprintf("value-%02d", i)
	}
	poison := lily.Message{EventID: "poison-" + qc.Name, Body: []byte{0, 1, 2, 0xff, 'p'}, Headers: h}
	msgs := []lily.Message{poison}
	for i := range 4 {
		msgs = append(msgs, lily.Message{EventID: fmt.Sprintf("healthy-%d-%s", i, qc.Name), Body: []byte(fmt.Sprintf("ok %d", i))})
	}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	refused := map[string]string{}
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventDeadLettered && e.Refused != "" {
			mu.Lock()
			refused[e.EventID] = e.Refused
			mu.Unlock()
		}
	})
	c, err := lily.NewConsumer(acc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		calls[d.EventID]++
		mu.Unlock()
		if d.EventID == poison.EventID {
			return lily.Permanent(errors.New("schema v9 not supported"))
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 1, Prefetch: 1, ReceiveWait: 50 * time.Millisecond, Hooks: []lily.Hook{hook}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	transporttest.WaitForState(t, "every message handled and the poison stored", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == len(msgs) && len(refused) == 1, fmt.Sprintf("%d of %d handled, %d refused", len(calls), len(msgs), len(refused))
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if calls[m.EventID] != 1 {
			t.Errorf("handler ran %d times for %s, want once", calls[m.EventID], m.EventID)
		}
	}
	if !strings.Contains(refused[poison.EventID], "message limits") {
		t.Errorf("refused events %v, want the poison's, naming the message limits", refused)
	}
	es := entries(t, store, qc.Name)
	if len(es) != 1 {
		t.Fatalf("%d catalog entries, want the poison's", len(es))
	}
	e := es[0]
	note, _ := e.Headers[evidence.HeaderDLQRefused].(string)
	if e.EventID != poison.EventID || string(e.Body) != string(poison.Body) || e.Reason != string(evidence.ReasonPermanent) ||
		!strings.Contains(e.ErrorMessage, "schema v9 not supported") || !strings.Contains(note, "at most 100") {
		t.Errorf("entry %s: body %q reason %q error %q note %q: want the original, permanent, the handler's error, the limit", e.EventID, e.Body, e.Reason, e.ErrorMessage, note)
	}
	for k, v := range h {
		if e.Headers[k] != v {
			t.Errorf("entry header %s = %v, want the producer's %q", k, e.Headers[k], v)
		}
	}
	// The evidence a fitting copy would have given up first is kept.
	if _, trimmed := e.Headers[pubsub.HeaderEvidenceTrimmed]; trimmed || e.Headers[evidence.HeaderHost] == nil || e.Headers[evidence.HeaderFirstFailureAt] == nil {
		t.Errorf("entry evidence trimmed %v, headers %v: want the full evidence in the catalog", trimmed, e.Headers)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("dead-letter subscription holds %d (%v), want nothing: the copy was refused", n, err)
	}
	if _, err := store.Ingest(ctx, acc, qc.Name); err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(store).Rows(ctx, acc)
	want := ledger.Row{Queue: qc.Name, Accepted: int64(len(msgs)), Acked: int64(len(msgs) - 1), DeadLettered: 1}
	if err != nil || len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v (%v), want %+v", rows, err, want)
	}
}

// serviceLimit refuses, as the real service does for a message over its
// limits, a publish to a topic ending in ".dlt" that holds a message whose
// data is over max bytes (pstest checks no limit: the refusal is the
// service's answer, simulated in the test, never in the transport).
type serviceLimit struct{ max int }

func (l serviceLimit) React(req any) (bool, any, error) {
	r, ok := req.(*pubsubpb.PublishRequest)
	if !ok || !strings.HasSuffix(r.Topic, ".dlt") {
		return false, nil, nil
	}
	for _, m := range r.Messages {
		if len(m.Data) > l.max {
			return true, nil, status.Errorf(codes.InvalidArgument, "Request payload size exceeds the limit: %d bytes", l.max)
		}
	}
	return false, nil, nil
}

// TestDeadLetterTheServiceRefusesStoredInCatalog: a dead-letter copy
// Lily's own check passes but the service refuses (INVALID_ARGUMENT for
// the whole publish request) is stored in the catalog with the service's
// answer, while the small copy published in the same request is sent
// again alone and reaches the dead-letter topic; both originals are
// acknowledged and the ledger balances.
func TestDeadLetterTheServiceRefusesStoredInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: serviceLimit{max: 1 << 10}})
	t.Cleanup(func() { srv.Close() })
	tr := open(t, srv, withCount(srv))
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	qc := lily.QueueConfig{Name: fmt.Sprintf("refused.svc.%08x", rand.Uint32()), Transport: lily.TransportPubSub}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("B", 4<<10))
	msgs := []lily.Message{{EventID: "big-" + qc.Name, Body: big}, {EventID: "small-" + qc.Name, Body: []byte("small")}}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	transporttest.WaitFor(t, "both messages received", func() bool {
		got, err := acc.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 2, Wait: 100 * time.Millisecond, Consumer: "refused"})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
		return len(ds) == 2
	})
	var ss []transport.Settlement
	for _, d := range ds {
		h := transport.CloneHeaders(d.Headers)
		if h == nil {
			h = transport.Headers{}
		}
		h[evidence.HeaderReason] = string(evidence.ReasonPermanent)
		h[evidence.HeaderErrorMessage] = "permanent: cannot handle " + d.EventID
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Reason: string(evidence.ReasonPermanent), Headers: h})
	}
	stored := map[string]string{}
	if err := acc.Settle(ctx, &transport.SettleParams{Settlements: ss, OnStored: func(i int, why string) { stored[ds[i].EventID] = why }}); err != nil {
		t.Fatalf("settle: %v, want both applied (one through the catalog)", err)
	}
	if len(stored) != 1 || !strings.Contains(stored[msgs[0].EventID], "Request payload size exceeds the limit") {
		t.Fatalf("stored in the catalog: %v, want %s alone, with the service's answer", stored, msgs[0].EventID)
	}
	if n := inFlight(srv, tr, qc.Name); n != 0 {
		t.Errorf("%d originals unacknowledged, want none", n)
	}
	if _, err := store.Ingest(ctx, acc, qc.Name); err != nil {
		t.Fatal(err)
	}
	es := entries(t, store, qc.Name)
	byID := map[string]string{}
	for _, e := range es {
		note, _ := e.Headers[evidence.HeaderDLQRefused].(string)
		byID[e.EventID] = note
		if e.Reason != string(evidence.ReasonPermanent) || e.ErrorMessage != "permanent: cannot handle "+e.EventID {
			t.Errorf("entry %s: reason %q error %q, want permanent and the handler's error", e.EventID, e.Reason, e.ErrorMessage)
		}
		if e.EventID == msgs[0].EventID && string(e.Body) != string(big) {
			t.Errorf("entry %s: body of %d bytes, want the original %d", e.EventID, len(e.Body), len(big))
		}
	}
	if len(es) != 2 || !strings.Contains(byID[msgs[0].EventID], "refused the dead-letter copy") || byID[msgs[1].EventID] != "" {
		t.Errorf("entries %v, want the big one noted as refused, the small one from the dead-letter topic", byID)
	}
	rows, err := ledger.New(store).Rows(ctx, acc)
	if want := (ledger.Row{Queue: qc.Name, Accepted: 2, DeadLettered: 2}); err != nil || len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v (%v), want %+v", rows, err, want)
	}
}
