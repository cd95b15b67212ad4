package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// holdConnection takes the pool's only connection, so that the writer
// blocks in its next BeginTx and the callers' writes pile up behind it.
// The returned function gives the connection back.
func holdConnection(t *testing.T, tr *Transport) func() {
	t.Helper()
	conn, err := tr.DB().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { conn.Close() }) }
	t.Cleanup(release) // before Close (registered after open's), which waits for the writer
	return release
}

func (t *Transport) pendingLen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

func (t *Transport) parkedLen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.parked)
}

// eventIDs lists the event IDs of queue's messages, sorted.
func eventIDs(t *testing.T, tr *Transport, queue string) []string {
	t.Helper()
	rows, err := tr.DB().Query(`SELECT event_id FROM lily_messages WHERE queue = ? ORDER BY event_id`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// Concurrent callers' writes share one transaction, and each caller gets
// its own outcome: a settlement, two publishes and a lease that waited
// behind a held connection commit together; the lease (run after the
// publishes) takes what they published.
func TestGroupCommitSharesATransaction(t *testing.T) {
	tr := open(t, Options{}, "q")
	ctx := context.Background()
	publish(t, tr, "q", "m0")
	ds0 := receive(t, tr, transport.ReceiveParams{})
	release := holdConnection(t, tr)
	g0 := tr.groups.Load()

	first := make(chan error, 1)
	go func() { // taken by the writer, which then waits for the connection
		first <- tr.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "m1", Body: []byte("b")}}})
	}()
	transporttest.WaitFor(t, "the writer takes the first publish", func() bool { return tr.groups.Load() == g0+1 })

	type received struct {
		ds  []*transport.Delivery
		err error
	}
	errs := make(chan error, 2)
	got := make(chan received, 1)
	go func() {
		errs <- tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds0[0], Action: transport.Ack}}})
	}()
	go func() {
		errs <- tr.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "m2", Body: []byte("b")}, {EventID: "m3", Body: []byte("b")}}})
	}()
	transporttest.WaitFor(t, "settle and publish queued", func() bool { return tr.pendingLen() == 2 })
	go func() {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "q", Consumer: "c", Max: 10})
		got <- received{ds, err}
	}()
	transporttest.WaitFor(t, "the lease queued", func() bool { return tr.pendingLen() == 3 })
	release()

	if err := <-first; err != nil {
		t.Fatalf("first publish: %v", err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("settle or publish: %v", err)
		}
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Receive: %v", r.err)
	}
	ids := summary(r.ds)
	sort.Strings(ids)
	if want := []string{"m1/1", "m2/1", "m3/1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("lease in the group took %v, want %v (run after the publishes of its transaction)", ids, want)
	}
	if n := tr.shared.Load(); n != 3 {
		t.Errorf("%d writes committed in a shared transaction, want 3 (settle, publish, lease)", n)
	}
	conserved(t, tr, "q", r.ds...)
}

// A write that fails in a group rolls the group back; every write then
// runs alone, so the failure stays with its caller: a publish to an
// unknown queue fails, the publish and the settlement beside it commit.
func TestGroupCommitFailureStaysWithItsCaller(t *testing.T) {
	tr := open(t, Options{}, "q")
	ctx := context.Background()
	publish(t, tr, "q", "m0")
	ds0 := receive(t, tr, transport.ReceiveParams{})

	// The writer is driven by hand: runGroup on writes made as the
	// methods make them.
	ack := &write{kind: writeSettle, what: "settle", ctx: ctx, done: make(chan error, 1)}
	errs := make([]error, 1)
	ack.run = func(ctx context.Context, tx *sql.Tx) error {
		_, _, err := tr.settleTx(ctx, tx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds0[0], Action: transport.Ack}}}, errs)
		return err
	}
	pub := func(queue, id string) *write {
		w := &write{kind: writePublish, what: "publish", ctx: ctx, done: make(chan error, 1)}
		w.run = func(ctx context.Context, tx *sql.Tx) error {
			return tr.enqueue(ctx, tx, &transport.PublishParams{Queue: queue, Messages: []transport.Message{{EventID: id, Body: []byte("b")}}})
		}
		return w
	}
	good, bad := pub("q", "m1"), pub("nope", "x1")
	runs := 0
	ack.run = func(run func(context.Context, *sql.Tx) error) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error { runs++; return run(ctx, tx) }
	}(ack.run)

	tr.runGroup([]*write{good, bad, ack})
	if err := <-good.done; err != nil {
		t.Errorf("publish beside the failure: %v", err)
	}
	if err := <-bad.done; !errors.Is(err, transport.ErrUnknownQueue) {
		t.Errorf("publish to an unknown queue: %v, want ErrUnknownQueue", err)
	}
	if err := <-ack.done; err != nil || errs[0] != nil {
		t.Errorf("settlement beside the failure: %v, %v", err, errs[0])
	}
	if runs != 2 {
		t.Errorf("the settlement ran %d times, want 2 (in the group, then alone)", runs)
	}
	if n := tr.shared.Load(); n != 0 {
		t.Errorf("%d writes counted in a shared commit, want 0 (the group was rolled back)", n)
	}
	if got := eventIDs(t, tr, "q"); !reflect.DeepEqual(got, []string{"m1"}) {
		t.Errorf("queue holds %v, want [m1] (m0 acked once, m1 published once)", got)
	}
	if r := ledgerOf(t, tr)["q"]; r.Accepted != 2 || r.Acked != 1 {
		t.Errorf("ledger = %+v, want accepted 2, acked 1 (the rolled-back group counted nothing)", r)
	}
	conserved(t, tr, "q", receive(t, tr, transport.ReceiveParams{})...)
}

// A caller whose context ends while its write waits withdraws it: nothing
// of it is written, and the writes around it go on.
func TestGroupCommitWithdrawnWrite(t *testing.T) {
	tr := open(t, Options{}, "q")
	ctx := context.Background()
	release := holdConnection(t, tr)
	g0 := tr.groups.Load()
	first := make(chan error, 1)
	go func() {
		first <- tr.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "m1", Body: []byte("b")}}})
	}()
	transporttest.WaitFor(t, "the writer takes the first publish", func() bool { return tr.groups.Load() == g0+1 })
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		gone <- tr.Publish(cctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "m2", Body: []byte("b")}}})
	}()
	transporttest.WaitFor(t, "the second publish queued", func() bool { return tr.pendingLen() == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Errorf("withdrawn publish = %v, want context.Canceled", err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("first publish: %v", err)
	}
	publish(t, tr, "q", "m3") // the writer goes on past the withdrawn write
	if got := eventIDs(t, tr, "q"); !reflect.DeepEqual(got, []string{"m1", "m3"}) {
		t.Errorf("queue holds %v, want [m1 m3] (the withdrawn publish wrote nothing)", got)
	}
	if r := ledgerOf(t, tr)["q"]; r.Accepted != 2 {
		t.Errorf("ledger = %+v, want accepted 2", r)
	}
	conserved(t, tr, "q", receive(t, tr, transport.ReceiveParams{Max: 10})...)
}

// A Receive that waits parks its lease on the next publish into its queue:
// the lease runs in the publish's transaction and takes what it published.
func TestParkedLeaseRidesOnThePublish(t *testing.T) {
	tr := open(t, Options{PollInterval: time.Hour}, "q", "other")
	ctx := context.Background()
	got := make(chan []*transport.Delivery, 1)
	go func() {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "q", Consumer: "c", Max: 10, Wait: time.Hour})
		if err != nil {
			t.Errorf("Receive: %v", err)
		}
		got <- ds
	}()
	transporttest.WaitFor(t, "the lease parked", func() bool { return tr.parkedLen() == 1 })
	publish(t, tr, "q", "m1", "m2")
	ds := <-got
	if got := summary(ds); !reflect.DeepEqual(got, []string{"m1/1", "m2/1"}) {
		t.Errorf("parked lease took %v, want [m1/1 m2/1]", got)
	}
	if n := tr.shared.Load(); n != 2 {
		t.Errorf("%d writes committed in a shared transaction, want 2 (the publish and the parked lease)", n)
	}
	if n := tr.parkedLen(); n != 0 {
		t.Errorf("%d leases still parked", n)
	}
	conserved(t, tr, "q", ds...)
}

// joinParked adds to a group the leases parked on the queues its
// publishes write to, oldest first, until their limits cover what the
// publishes add; withdrawn ones are left out.
func TestJoinParkedCoversThePublishes(t *testing.T) {
	tr := open(t, Options{}, "q", "other")
	lease := func(queue string, limit int) *write { return &write{kind: writeLease, queue: queue, count: limit} }
	q1, q2, q3, other := lease("q", 3), lease("q", 3), lease("q", 3), lease("other", 10)
	gone := lease("q", 100)
	gone.state.Store(writeWithdrawn)
	tr.parked = []*write{gone, q1, other, q2, q3}
	tr.mu.Lock()
	ws := tr.joinParked([]*write{{kind: writeSettle}, {kind: writePublish, readies: true, queue: "q", count: 5}})
	tr.mu.Unlock()
	if len(ws) != 4 || ws[2] != q1 || ws[3] != q2 {
		t.Errorf("group = %d writes, want the settlement, the publish and the two oldest leases parked on q", len(ws))
	}
	if want := []*write{gone, other, q3}; !reflect.DeepEqual(tr.parked, want) {
		t.Errorf("still parked: %d, want the withdrawn one, the lease on the other queue and the third on q", len(tr.parked))
	}
	tr.parked = nil
}

// A group's commit wakes waiting receivers unless all it made ready is
// publishes into queues that a lease of the group drained.
func TestGroupWakes(t *testing.T) {
	pub := func(q string) *write { return &write{kind: writePublish, readies: true, queue: q, wakes: true} }
	lease := func(q string, drained bool) *write { return &write{kind: writeLease, queue: q, drained: drained} }
	for _, tt := range []struct {
		name string
		ws   []*write
		want bool
	}{
		{"publish alone", []*write{pub("q")}, true},
		{"publish drained by a lease", []*write{pub("q"), lease("q", false), lease("q", true)}, false},
		{"publish, lease took up to its limit", []*write{pub("q"), lease("q", false)}, true},
		{"publish into another queue", []*write{pub("q"), pub("r"), lease("q", true)}, true},
		{"a retry beside", []*write{{kind: writeSettle, wakes: true}, pub("q"), lease("q", true)}, true},
		{"acks only", []*write{{kind: writeSettle}, lease("q", true)}, false},
	} {
		if got := groupWakes(tt.ws); got != tt.want {
			t.Errorf("%s: groupWakes = %v, want %v", tt.name, got, tt.want)
		}
	}
}
