package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// clock is a manual clock for Options.Now.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func open(t *testing.T, o Options, queues ...string) *Transport {
	t.Helper()
	ctx := context.Background()
	tr, err := Open(ctx, filepath.Join(t.TempDir(), "lily.db"), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	if len(queues) > 0 {
		specs := make([]transport.QueueSpec, len(queues))
		for i, q := range queues {
			specs[i] = transport.QueueSpec{Name: q}
		}
		if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
			t.Fatalf("Declare: %v", err)
		}
	}
	return tr
}

func publish(t *testing.T, tr *Transport, queue string, ids ...string) {
	t.Helper()
	msgs := make([]transport.Message, len(ids))
	for i, id := range ids {
		msgs[i] = transport.Message{EventID: id, Body: []byte("body-" + id)}
	}
	if err := tr.Publish(context.Background(), &transport.PublishParams{Queue: queue, Messages: msgs}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

func receive(t *testing.T, tr *Transport, p transport.ReceiveParams) []*transport.Delivery {
	t.Helper()
	if p.Queue == "" {
		p.Queue = "q"
	}
	if p.Consumer == "" {
		p.Consumer = "c"
	}
	ds, err := tr.Receive(context.Background(), &p)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return ds
}

func settle(tr *Transport, ss ...transport.Settlement) error {
	return tr.Settle(context.Background(), &transport.SettleParams{Settlements: ss})
}

// summary is "id/count" for each delivery.
func summary(ds []*transport.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%s/%d", d.EventID, d.DeliveryCount)
	}
	return out
}

func inFlight(t *testing.T, tr *Transport, queue string) int64 {
	t.Helper()
	n, err := tr.InFlight(context.Background(), queue)
	if err != nil {
		t.Fatalf("InFlight: %v", err)
	}
	return n
}

func ledgerOf(t testing.TB, tr *Transport) map[string]ledger.Row {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	out := map[string]ledger.Row{}
	for _, r := range rows {
		out[r.Queue] = r
	}
	return out
}

func entries(t *testing.T, tr *Transport, queue string) []*catalog.Entry {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	var out []*catalog.Entry
	if err := cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// mixedReady leaves q with, in queue order: m1 (first delivery), m2 (first
// delivery), m3 (redelivered once), m4 (never delivered). Retry resets the
// count of m1 and m2; Release keeps m3's.
// conserved acks ds, then checks that queue's ledger balances: every
// message published is acked, dead-lettered or discarded, none in flight.
func conserved(t *testing.T, tr *Transport, queue string, ds ...*transport.Delivery) {
	t.Helper()
	if len(ds) > 0 {
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		}
		if err := settle(tr, ss...); err != nil {
			t.Fatalf("final acks: %v", err)
		}
	}
	r := ledgerOf(t, tr)[queue]
	if r.InFlight != 0 || r.Lost != 0 || r.Accepted != r.Acked+r.DeadLettered+r.Discarded {
		cat, err := catalog.New(context.Background(), tr.DB())
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("ledger of %s = %+v, want every message settled and none in flight\n%s",
			queue, r, transporttest.ExplainLedger(context.Background(), cat, tr, r))
	}
}

func mixedReady(t *testing.T, tr *Transport) {
	t.Helper()
	publish(t, tr, "q", "m1", "m2", "m3", "m4")
	ds := receive(t, tr, transport.ReceiveParams{Max: 3})
	if got := summary(ds); !reflect.DeepEqual(got, []string{"m1/1", "m2/1", "m3/1"}) {
		t.Fatalf("first receive = %v", got)
	}
	if err := settle(tr,
		transport.Settlement{Delivery: ds[0], Action: transport.Retry, Headers: transport.Headers{"x-retry-count": int32(1)}},
		transport.Settlement{Delivery: ds[1], Action: transport.Retry, Headers: transport.Headers{"x-retry-count": int32(1)}},
		transport.Settlement{Delivery: ds[2], Action: transport.Release},
	); err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

func TestIsolateRedeliveries(t *testing.T) {
	t.Run("redelivered head alone", func(t *testing.T) {
		clk := newClock()
		tr := open(t, Options{Now: clk.Now}, "q")
		publish(t, tr, "q", "m1", "m2", "m3")
		if got := summary(receive(t, tr, transport.ReceiveParams{Max: 1, Consumer: "A"})); !reflect.DeepEqual(got, []string{"m1/1"}) {
			t.Fatalf("receive = %v", got)
		}
		if n, err := tr.RecoverLeases(context.Background(), &transport.RecoverParams{Consumer: "A"}); err != nil || n != 1 {
			t.Fatalf("RecoverLeases = %d, %v", n, err)
		}
		p := transport.ReceiveParams{Max: 10, IsolateRedeliveries: true}
		head := receive(t, tr, p)
		if got := summary(head); !reflect.DeepEqual(got, []string{"m1/2"}) {
			t.Errorf("redelivered head: %v, want [m1/2] alone", got)
		}
		rest := receive(t, tr, p)
		if got := summary(rest); !reflect.DeepEqual(got, []string{"m2/1", "m3/1"}) {
			t.Errorf("then: %v, want [m2/1 m3/1]", got)
		}
		conserved(t, tr, "q", append(head, rest...)...)
	})
	t.Run("batch stops before the first redelivery", func(t *testing.T) {
		tr := open(t, Options{Now: newClock().Now}, "q")
		mixedReady(t, tr)
		p := transport.ReceiveParams{Max: 10, IsolateRedeliveries: true}
		// Retried copies are new rows: they queue behind m3 and m4.
		var all []*transport.Delivery
		for i, want := range [][]string{{"m3/2"}, {"m4/1", "m1/1", "m2/1"}, {}} {
			ds := receive(t, tr, p)
			if got := summary(ds); !reflect.DeepEqual(got, want) {
				t.Errorf("receive %d = %v, want %v", i, got, want)
			}
			all = append(all, ds...)
		}
		conserved(t, tr, "q", all...)
	})
	t.Run("without the flag batches mix", func(t *testing.T) {
		tr := open(t, Options{Now: newClock().Now}, "q")
		mixedReady(t, tr)
		ds := receive(t, tr, transport.ReceiveParams{Max: 10})
		if got, want := summary(ds), []string{"m3/2", "m4/1", "m1/1", "m2/1"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("receive = %v, want %v", got, want)
		}
		// The retried copies carry their new headers.
		if got := ds[2].Headers["x-retry-count"]; got != int32(1) {
			t.Errorf("retried copy x-retry-count = %#v, want int32(1)", got)
		}
		if ds[0].Headers != nil {
			t.Errorf("released message headers changed: %#v", ds[0].Headers)
		}
		conserved(t, tr, "q", ds...)
	})
}

func TestIsolateUnit(t *testing.T) {
	c := func(counts ...int) []candidate {
		out := make([]candidate, len(counts))
		for i, n := range counts {
			out[i] = candidate{id: int64(i + 1), count: n}
		}
		return out
	}
	tests := []struct {
		in   []candidate
		want int
	}{
		{c(0), 1}, {c(1), 1}, {c(0, 0, 0), 3}, {c(2, 0, 0), 1}, {c(0, 0, 1, 0), 2}, {c(0, 3), 1}, {c(1, 1), 1},
	}
	for _, tt := range tests {
		if got := isolate(tt.in); len(got) != tt.want || got[0].id != 1 {
			t.Errorf("isolate(%v) = %v, want the first %d", tt.in, got, tt.want)
		}
	}
}

func TestLeaseFencing(t *testing.T) {
	for _, action := range []transport.Action{transport.Ack, transport.Retry, transport.DeadLetter, transport.Release} {
		t.Run(action.String(), func(t *testing.T) {
			clk := newClock()
			tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Second}, "q")
			publish(t, tr, "q", "m1", "m2")
			old := receive(t, tr, transport.ReceiveParams{Max: 2, Consumer: "A"})
			if len(old) != 2 {
				t.Fatalf("A received %v", summary(old))
			}
			clk.Advance(2 * time.Second) // A's leases expire
			again := receive(t, tr, transport.ReceiveParams{Max: 1, Consumer: "B"})
			if got := summary(again); !reflect.DeepEqual(got, []string{"m1/2"}) {
				t.Fatalf("B received %v, want [m1/2]", got)
			}
			// A settles both: m1 with a stale receipt, m2 (not handed out
			// again) with a valid one.
			err := settle(tr,
				transport.Settlement{Delivery: old[0], Action: action, Headers: transport.Headers{"stale": true}, Reason: "permanent"},
				transport.Settlement{Delivery: old[1], Action: transport.Ack},
			)
			var se *transport.SettleError
			if !errors.As(err, &se) {
				t.Fatalf("Settle = %v, want a *SettleError", err)
			}
			errs := transport.SettleErrors(err, 2)
			if !errors.Is(errs[0], transport.ErrLeaseLost) {
				t.Errorf("stale settlement error = %v, want ErrLeaseLost", errs[0])
			}
			if errs[1] != nil {
				t.Errorf("valid settlement in the same batch failed: %v", errs[1])
			}
			// Nothing changed for m1: B still holds it, no dead letter.
			if n := inFlight(t, tr, "q"); n != 1 {
				t.Errorf("in flight = %d, want 1 (m1 only)", n)
			}
			if es := entries(t, tr, "q"); len(es) != 0 {
				t.Errorf("stale dead-letter created %d entries", len(es))
			}
			if ds := receive(t, tr, transport.ReceiveParams{Max: 10, Consumer: "C"}); len(ds) != 0 {
				t.Errorf("m1 became visible again: %v", summary(ds))
			}
			if err := settle(tr, transport.Settlement{Delivery: again[0], Action: transport.Ack}); err != nil {
				t.Errorf("B's ack: %v", err)
			}
			r := ledgerOf(t, tr)["q"]
			if r.Accepted != 2 || r.Acked != 2 || r.DeadLettered != 0 || r.InFlight != 0 || r.Lost != 0 {
				t.Errorf("ledger = %+v", r)
			}
		})
	}
}

// TestStaleReceiptAfterRetryIsFenced: a retried copy is a new copy whose
// receive count starts again; a receipt from before the retry must not
// settle it. A leases m (count 1) and stalls past its lease; B receives it
// (count 2) and retries it (count reset to 0); C receives the copy (count 1
// again). A's late ack must fail with ErrLeaseLost and leave C's delivery
// alone.
func TestStaleReceiptAfterRetryIsFenced(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Second}, "q")
	publish(t, tr, "q", "m")
	a := receive(t, tr, transport.ReceiveParams{Consumer: "A"})
	clk.Advance(2 * time.Second)
	b := receive(t, tr, transport.ReceiveParams{Consumer: "B"})
	if got := summary(b); !reflect.DeepEqual(got, []string{"m/2"}) {
		t.Fatalf("B received %v", got)
	}
	if err := settle(tr, transport.Settlement{Delivery: b[0], Action: transport.Retry,
		Headers: transport.Headers{"x-retry-count": int32(1)}}); err != nil {
		t.Fatalf("B's retry: %v", err)
	}
	c := receive(t, tr, transport.ReceiveParams{Consumer: "C"})
	if got := summary(c); !reflect.DeepEqual(got, []string{"m/1"}) {
		t.Fatalf("C received %v", got)
	}
	err := settle(tr, transport.Settlement{Delivery: a[0], Action: transport.Ack})
	if !errors.Is(transport.SettleErrors(err, 1)[0], transport.ErrLeaseLost) {
		t.Errorf("A's stale ack after a retry = %v, want ErrLeaseLost (it settled C's delivery)", err)
	}
	if n := inFlight(t, tr, "q"); n != 1 {
		t.Errorf("in flight = %d, want 1: the stale receipt removed the retried copy C holds", n)
	}
	if err := settle(tr, transport.Settlement{Delivery: c[0], Action: transport.Ack}); err != nil {
		t.Errorf("C's ack = %v, want nil", err)
	}
	conserved(t, tr, "q")
}

func TestVisibilityTimeoutRedelivers(t *testing.T) {
	tr := open(t, Options{VisibilityTimeout: 50 * time.Millisecond, PollInterval: 5 * time.Millisecond}, "q")
	if f := tr.Features(); !f.Leases || !f.DelayedRetry || f.BrokerDeliveryLimit || f.VisibilityTimeout != 50*time.Millisecond {
		t.Errorf("Features = %+v", f)
	}
	publish(t, tr, "q", "m")
	first := receive(t, tr, transport.ReceiveParams{Consumer: "A"})
	if got := summary(first); !reflect.DeepEqual(got, []string{"m/1"}) {
		t.Fatalf("first receive = %v", got)
	}
	if ds := receive(t, tr, transport.ReceiveParams{Consumer: "B"}); len(ds) != 0 {
		t.Fatalf("leased message handed out again at once: %v", summary(ds))
	}
	again := receive(t, tr, transport.ReceiveParams{Consumer: "B", Wait: 10 * time.Second})
	if got := summary(again); !reflect.DeepEqual(got, []string{"m/2"}) {
		t.Fatalf("after the visibility timeout: %v, want [m/2]", got)
	}
	if again[0].MessageID != first[0].MessageID || string(again[0].Body) != "body-m" {
		t.Errorf("redelivery is a different message: %+v", again[0])
	}
	conserved(t, tr, "q", again...)
}

func TestRecoverLeasesOnlyNamedConsumer(t *testing.T) {
	ctx := context.Background()
	tr := open(t, Options{}, "q")
	publish(t, tr, "q", "m1", "m2", "m3")
	a := receive(t, tr, transport.ReceiveParams{Consumer: "A"})
	b := receive(t, tr, transport.ReceiveParams{Consumer: "B"})
	if summary(a)[0] != "m1/1" || summary(b)[0] != "m2/1" {
		t.Fatalf("A got %v, B got %v", summary(a), summary(b))
	}
	recover := func(c string) int {
		n, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: c})
		if err != nil {
			t.Fatalf("RecoverLeases(%s): %v", c, err)
		}
		return n
	}
	if n := recover("nobody"); n != 0 {
		t.Errorf("RecoverLeases(nobody) = %d", n)
	}
	if n := recover("A"); n != 1 {
		t.Errorf("RecoverLeases(A) = %d, want 1", n)
	}
	got := summary(receive(t, tr, transport.ReceiveParams{Max: 10, Consumer: "C"}))
	sort.Strings(got)
	if want := []string{"m1/2", "m3/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after recovering A: %v, want %v (B's m2 stays leased)", got, want)
	}
	if n := recover("A"); n != 0 {
		t.Errorf("second RecoverLeases(A) = %d, want 0 (C holds m1 now)", n)
	}
	// A's receipt is stale now; B's is still good.
	if err := settle(tr, transport.Settlement{Delivery: a[0], Action: transport.Ack}); !errors.Is(transport.SettleErrors(err, 1)[0], transport.ErrLeaseLost) {
		t.Errorf("A's ack after recovery = %v, want ErrLeaseLost", err)
	}
	if err := settle(tr, transport.Settlement{Delivery: b[0], Action: transport.Ack}); err != nil {
		t.Errorf("B's ack: %v", err)
	}
	if n := recover("C"); n != 2 {
		t.Errorf("RecoverLeases(C) = %d, want 2", n)
	}
	conserved(t, tr, "q", receive(t, tr, transport.ReceiveParams{Max: 10, Consumer: "D"})...)
}

// TestReceiveWakesOnPublish: a publish wakes a Receive that waits. The
// poll interval and the wait are an hour, so that only the publish can
// end the wait: the test waits for the Receive to leave the parked list
// and fails, naming it, if it does not.
func TestReceiveWakesOnPublish(t *testing.T) {
	tr := open(t, Options{PollInterval: time.Hour}, "q")
	receive(t, tr, transport.ReceiveParams{}) // the queue is empty
	type result struct {
		ds  []*transport.Delivery
		err error
	}
	got := make(chan result, 1)
	go func() {
		ds, err := tr.Receive(context.Background(), &transport.ReceiveParams{Queue: "q", Consumer: "c", Wait: time.Hour})
		got <- result{ds, err}
	}()
	waitParked(t, tr, 1) // the publish comes while the Receive waits
	publish(t, tr, "q", "late")
	waitUnparked(t, tr, "the publish to wake the waiting Receive (poll interval and wait: an hour)")
	r := <-got
	if r.err != nil {
		t.Fatalf("Receive: %v", r.err)
	}
	if s := summary(r.ds); !reflect.DeepEqual(s, []string{"late/1"}) {
		t.Fatalf("Receive = %v, want [late/1]", s)
	}
}

// waitParked waits until n Receives of tr are parked: blocked, waiting
// for a publish into their queue (group.go). It is how a test knows that
// a Receive waits before it publishes, cancels or closes.
func waitParked(t *testing.T, tr *Transport, n int) {
	t.Helper()
	transporttest.WaitForState(t, fmt.Sprintf("%d parked Receive(s)", n), func() (bool, string) {
		tr.mu.Lock()
		k := len(tr.parked)
		tr.mu.Unlock()
		return k >= n, fmt.Sprintf("%d parked", k)
	})
}

// waitUnparked waits until no Receive of tr is parked any more.
func waitUnparked(t *testing.T, tr *Transport, what string) {
	t.Helper()
	transporttest.WaitForState(t, what, func() (bool, string) {
		tr.mu.Lock()
		k := len(tr.parked)
		tr.mu.Unlock()
		return k == 0, fmt.Sprintf("%d parked", k)
	})
}

func TestReceiveWaitTimesOutEmpty(t *testing.T) {
	tr := open(t, Options{PollInterval: 5 * time.Millisecond}, "q")
	start := time.Now()
	ds := receive(t, tr, transport.ReceiveParams{Wait: 30 * time.Millisecond})
	if len(ds) != 0 {
		t.Errorf("Receive on an empty queue = %v", summary(ds))
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Errorf("Receive returned before its wait")
	}
}

func TestReceiveContextCancelled(t *testing.T) {
	tr := open(t, Options{PollInterval: time.Hour}, "q")
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		ds  []*transport.Delivery
		err error
	}
	got := make(chan result, 1)
	go func() {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "q", Consumer: "c", Wait: time.Hour})
		got <- result{ds, err}
	}()
	waitParked(t, tr, 1) // cancel a Receive that waits
	cancel()
	waitUnparked(t, tr, "the cancellation to end the waiting Receive (poll interval and wait: an hour)")
	r := <-got
	if !errors.Is(r.err, context.Canceled) || len(r.ds) != 0 {
		t.Errorf("Receive = %v, %v; want context.Canceled", summary(r.ds), r.err)
	}
	// A cancelled context does not lease anything.
	publish(t, tr, "q", "m")
	if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "q", Consumer: "c"}); err == nil {
		t.Error("Receive with a cancelled context succeeded")
	}
	if got := summary(receive(t, tr, transport.ReceiveParams{})); !reflect.DeepEqual(got, []string{"m/1"}) {
		t.Errorf("after a cancelled Receive: %v, want [m/1] (not counted)", got)
	}
}

func TestReceiveAfterClose(t *testing.T) {
	tr := open(t, Options{PollInterval: 20 * time.Second}, "q")
	errc := make(chan error, 1)
	go func() {
		_, err := tr.Receive(context.Background(), &transport.ReceiveParams{Queue: "q", Consumer: "c", Wait: 30 * time.Second})
		errc <- err
	}()
	waitParked(t, tr, 1) // close under a Receive that waits
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("blocked Receive = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Receive did not return after Close")
	}
	if _, err := tr.Receive(context.Background(), &transport.ReceiveParams{Queue: "q"}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestMethodsAfterCloseReturnErrClosed: "ErrClosed is returned by a
// transport after Close" (transport.ErrClosed) holds for every method, not
// only Receive, so that callers can tell shutdown from a database failure.
func TestMethodsAfterCloseReturnErrClosed(t *testing.T) {
	ctx := context.Background()
	tr := open(t, Options{}, "q")
	publish(t, tr, "q", "m")
	ds := receive(t, tr, transport.ReceiveParams{})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "x"}}}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
	if err := settle(tr, transport.Settlement{Delivery: ds[0], Action: transport.Ack}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Settle after Close = %v, want ErrClosed", err)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: "q2"}}}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Declare after Close = %v, want ErrClosed", err)
	}
}

func TestPublishUnknownQueue(t *testing.T) {
	tr := open(t, Options{}, "q")
	err := tr.Publish(context.Background(), &transport.PublishParams{Queue: "nope",
		Messages: []transport.Message{{EventID: "m"}}})
	if !errors.Is(err, transport.ErrUnknownQueue) {
		t.Fatalf("Publish to an undeclared queue = %v, want ErrUnknownQueue", err)
	}
	if !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("error does not name the queue: %v", err)
	}
	if _, ok := ledgerOf(t, tr)["nope"]; ok {
		t.Error("the undeclared queue got a ledger row")
	}
	if n := inFlight(t, tr, "nope"); n != 0 {
		t.Errorf("in flight = %d", n)
	}
}

func TestPublishRejectsEmptyEventID(t *testing.T) {
	tr := open(t, Options{}, "q")
	err := tr.Publish(context.Background(), &transport.PublishParams{Queue: "q",
		Messages: []transport.Message{{EventID: "ok"}, {EventID: ""}}})
	if err == nil {
		t.Fatal("Publish accepted a message without an event ID")
	}
	if !strings.Contains(err.Error(), "message 1") || !strings.Contains(err.Error(), "event ID") {
		t.Errorf("error does not say which message: %v", err)
	}
	if n := inFlight(t, tr, "q"); n != 0 {
		t.Errorf("in flight = %d, want 0 (nothing of the batch enqueued)", n)
	}
	if r := ledgerOf(t, tr)["q"]; r.Accepted != 0 {
		t.Errorf("accepted = %d, want 0", r.Accepted)
	}
	if err := tr.Publish(context.Background(), &transport.PublishParams{Queue: "q"}); err != nil {
		t.Errorf("empty Publish = %v", err)
	}
}

func TestPublishManyAndHeaders(t *testing.T) {
	tr := open(t, Options{}, "q")
	msgs := make([]transport.Message, 250) // more than one insert chunk
	for i := range msgs {
		msgs[i] = transport.Message{EventID: fmt.Sprintf("e%03d", i), Key: "k", Type: "t", Body: []byte{byte(i)}}
	}
	msgs[7].Headers = transport.Headers{"x-retry-count": int32(2), "s": "0", "nested": map[string]any{"b": []byte("x")}}
	if err := tr.Publish(context.Background(), &transport.PublishParams{Queue: "q", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	ds := receive(t, tr, transport.ReceiveParams{Max: 1000})
	if len(ds) != 250 {
		t.Fatalf("received %d, want 250", len(ds))
	}
	for i, d := range ds {
		if d.EventID != msgs[i].EventID || d.Body[0] != byte(i) || d.Key != "k" || d.Type != "t" || d.Queue != "q" {
			t.Fatalf("delivery %d = %+v, want %+v in order", i, d, msgs[i])
		}
	}
	if !reflect.DeepEqual(ds[7].Headers, msgs[7].Headers) {
		t.Errorf("headers = %#v, want %#v", ds[7].Headers, msgs[7].Headers)
	}
	if r := ledgerOf(t, tr)["q"]; r.Accepted != 250 || r.InFlight != 250 || r.Lost != 0 {
		t.Errorf("ledger = %+v", r)
	}
	conserved(t, tr, "q", ds...)
}

func TestInFlightCountsReadyLeasedDelayed(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now}, "q", "other")
	publish(t, tr, "q", "m1", "m2", "m3", "m4")
	publish(t, tr, "other", "o1")
	ds := receive(t, tr, transport.ReceiveParams{Max: 3})
	if err := settle(tr, transport.Settlement{Delivery: ds[0], Action: transport.Retry, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// m1 delayed, m2 and m3 leased, m4 ready.
	if n := inFlight(t, tr, "q"); n != 4 {
		t.Errorf("in flight = %d, want 4", n)
	}
	if err := settle(tr,
		transport.Settlement{Delivery: ds[1], Action: transport.Ack},
		transport.Settlement{Delivery: ds[2], Action: transport.DeadLetter, Reason: "permanent", Headers: transport.Headers{}},
	); err != nil {
		t.Fatal(err)
	}
	if n := inFlight(t, tr, "q"); n != 2 {
		t.Errorf("in flight after ack and dead-letter = %d, want 2", n)
	}
	if n := inFlight(t, tr, "other"); n != 1 {
		t.Errorf("other queue in flight = %d, want 1", n)
	}
	// The delay is honoured on the manual clock.
	m4 := receive(t, tr, transport.ReceiveParams{Max: 10})
	if !reflect.DeepEqual(summary(m4), []string{"m4/1"}) {
		t.Fatalf("before the delay: %v, want [m4/1]", summary(m4))
	}
	if err := settle(tr, transport.Settlement{Delivery: m4[0], Action: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour - time.Millisecond)
	if ds := receive(t, tr, transport.ReceiveParams{Max: 10}); len(ds) != 0 {
		t.Errorf("1ms before the delay: %v", summary(ds))
	}
	clk.Advance(time.Millisecond)
	due := receive(t, tr, transport.ReceiveParams{Max: 10})
	if !reflect.DeepEqual(summary(due), []string{"m1/1"}) {
		t.Errorf("at the delay: %v, want [m1/1]", summary(due))
	}
	conserved(t, tr, "q", due...)
	conserved(t, tr, "other", receive(t, tr, transport.ReceiveParams{Queue: "other", Max: 10})...)
}

func TestLedgerAfterPublishAckDeadLetter(t *testing.T) {
	tr := open(t, Options{}, "q", "idle")
	publish(t, tr, "q", "a1", "a2", "d1", "r1", "w1")
	ds := receive(t, tr, transport.ReceiveParams{Max: 4})
	h := transport.Headers{"x-lily-dead-letter-reason": "permanent", "x-lily-error-type": "*json.SyntaxError",
		"x-lily-error-message": "invalid character 'x'", "x-lily-delivery-count": int32(1)}
	if err := settle(tr,
		transport.Settlement{Delivery: ds[0], Action: transport.Ack},
		transport.Settlement{Delivery: ds[1], Action: transport.Ack},
		transport.Settlement{Delivery: ds[2], Action: transport.DeadLetter, Reason: "permanent", Headers: h},
		transport.Settlement{Delivery: ds[3], Action: transport.Retry, Delay: time.Hour, Headers: transport.Headers{"x-retry-count": int32(1)}},
	); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	rows := ledgerOf(t, tr)
	want := ledger.Row{Queue: "q", Accepted: 5, Acked: 2, DeadLettered: 1, InFlight: 2}
	if rows["q"] != want {
		t.Errorf("ledger = %+v, want %+v", rows["q"], want)
	}
	if r := rows["q"]; r.Accepted != r.Acked+r.DeadLettered+r.Discarded+r.InFlight || !r.Balanced() {
		t.Errorf("ledger does not balance: %+v", r)
	}
	if rows["idle"] != (ledger.Row{Queue: "idle"}) {
		t.Errorf("idle ledger = %+v", rows["idle"])
	}
	es := entries(t, tr, "q")
	if len(es) != 1 {
		t.Fatalf("%d catalog entries, want 1", len(es))
	}
	e := es[0]
	if e.EventID != "d1" || string(e.Body) != "body-d1" || e.Reason != "permanent" || e.ErrorType != "*json.SyntaxError" ||
		e.DeliveryCount != 1 || e.State != catalog.StatePending || !reflect.DeepEqual(e.Headers, h) {
		t.Errorf("entry = %+v", e)
	}
}

func TestSettlePerRowFailures(t *testing.T) {
	tr := open(t, Options{}, "q")
	publish(t, tr, "q", "m1", "m2", "m3")
	ds := receive(t, tr, transport.ReceiveParams{Max: 3})
	foreign := &transport.Delivery{Message: transport.Message{EventID: "f"}, Queue: "q", Receipt: "not ours"}
	err := settle(tr,
		transport.Settlement{Delivery: ds[0], Action: transport.Retry, Headers: transport.Headers{"bad": struct{}{}}},
		transport.Settlement{Delivery: foreign, Action: transport.Ack},
		transport.Settlement{Delivery: ds[1], Action: transport.Ack},
		transport.Settlement{Delivery: ds[2], Action: transport.DeadLetter, Headers: transport.Headers{"bad": make(chan int)}},
	)
	errs := transport.SettleErrors(err, 4)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), `"bad"`) {
		t.Errorf("unstorable retry headers: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "not received from this transport") {
		t.Errorf("foreign receipt: %v", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("valid ack: %v", errs[2])
	}
	if errs[3] == nil {
		t.Error("unstorable dead-letter headers accepted")
	}
	// m1 and m3 untouched (still leased by their first delivery), m2 gone.
	if n := inFlight(t, tr, "q"); n != 2 {
		t.Errorf("in flight = %d, want 2", n)
	}
	if es := entries(t, tr, "q"); len(es) != 0 {
		t.Errorf("%d dead letters from a failed settlement", len(es))
	}
	if err := settle(tr, transport.Settlement{Delivery: ds[0], Action: transport.Ack},
		transport.Settlement{Delivery: ds[2], Action: transport.Ack}); err != nil {
		t.Errorf("settling the untouched deliveries: %v", err)
	}
	if err := settle(tr); err != nil {
		t.Errorf("empty Settle = %v", err)
	}
	conserved(t, tr, "q")
}

func TestReceiveMaxBelowOne(t *testing.T) {
	tr := open(t, Options{}, "q")
	publish(t, tr, "q", "m1", "m2")
	zero := receive(t, tr, transport.ReceiveParams{Max: 0})
	if len(zero) != 1 {
		t.Errorf("Max 0 gave %d deliveries, want 1", len(zero))
	}
	neg := receive(t, tr, transport.ReceiveParams{Max: -5})
	if len(neg) != 1 {
		t.Errorf("Max -5 gave %d deliveries, want 1", len(neg))
	}
	conserved(t, tr, "q", append(zero, neg...)...)
}

func TestDeclareIdempotentAndQueues(t *testing.T) {
	ctx := context.Background()
	tr := open(t, Options{}, "b.queue", "a.queue")
	publish(t, tr, "a.queue", "m1", "m2")
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{
		{Name: "a.queue", BucketsMillis: []int64{1000}}, {Name: "c.queue"},
	}}); err != nil {
		t.Fatalf("second Declare: %v", err)
	}
	qs, err := tr.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.queue", "b.queue", "c.queue"}; !reflect.DeepEqual(qs, want) {
		t.Errorf("Queues = %v, want %v", qs, want)
	}
	if n := inFlight(t, tr, "a.queue"); n != 2 {
		t.Errorf("redeclaring dropped messages: in flight %d", n)
	}
	if r := ledgerOf(t, tr)["a.queue"]; r.Accepted != 2 || r.Lost != 0 {
		t.Errorf("redeclaring reset the ledger: %+v", r)
	}
	// A bad spec rolls back the whole Declare.
	err = tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: "d.queue"}, {Name: ""}}})
	if err == nil {
		t.Fatal("Declare of an empty name succeeded")
	}
	qs, _ = tr.Queues(ctx)
	if len(qs) != 3 {
		t.Errorf("a failed Declare left %v", qs)
	}
	empty := open(t, Options{})
	if qs, err := empty.Queues(ctx); err != nil || len(qs) != 0 {
		t.Errorf("Queues of a new database = %v, %v", qs, err)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{Synchronous: "SOMETIMES"})
	if err == nil || !strings.Contains(err.Error(), "SOMETIMES") {
		t.Errorf("Open with synchronous SOMETIMES = %v", err)
	}
	if _, err := Open(context.Background(), "", Options{}); err == nil {
		t.Error("Open with an empty path succeeded")
	}
}

func TestReopenKeepsMessages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lily.db")
	tr, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: "q"}}}); err != nil {
		t.Fatal(err)
	}
	publish(t, tr, "q", "m1", "m2")
	receive(t, tr, transport.ReceiveParams{Consumer: "dead"})
	tr.Close()

	tr2 := func() *Transport {
		tr2, err := Open(ctx, path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr2.Close() })
		return tr2
	}()
	if n, err := tr2.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "dead"}); err != nil || n != 1 {
		t.Fatalf("RecoverLeases after reopen = %d, %v", n, err)
	}
	ds := receive(t, tr2, transport.ReceiveParams{Max: 10})
	got := summary(ds)
	sort.Strings(got)
	if want := []string{"m1/2", "m2/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen: %v, want %v (the count survives)", got, want)
	}
	conserved(t, tr2, "q", ds...)
}
