package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/transporttest"
)

// otherSubscriber is another team's subscription on a Lily queue's topic.
type otherSubscriber struct {
	sub *vkit.SubscriptionAdminClient
	id  string
}

// subscribeOther creates subscription id on topic with the plain API (no
// Lily).
func subscribeOther(t *testing.T, srv *pstest.Server, topic, id string) *otherSubscriber {
	t.Helper()
	ctx := context.Background()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sub, err := vkit.NewSubscriptionAdminClient(ctx, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/" + project + "/subscriptions/" + id,
		Topic: "projects/" + project + "/topics/" + topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	return &otherSubscriber{sub: sub, id: id}
}

// drain pulls and acknowledges everything the subscription holds until a
// pull brings nothing, and returns the event IDs read, with their counts.
func (o *otherSubscriber) drain(t *testing.T) map[string]int {
	t.Helper()
	ctx := context.Background()
	seen := map[string]int{}
	for {
		resp, err := o.sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: "projects/" + project + "/subscriptions/" + o.id, MaxMessages: 100, ReturnImmediately: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ReceivedMessages) == 0 {
			return seen
		}
		var ack []string
		for _, rm := range resp.ReceivedMessages {
			seen[rm.GetMessage().GetAttributes()[evidence.HeaderEventID]]++
			ack = append(ack, rm.GetAckId())
		}
		if err := o.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: "projects/" + project + "/subscriptions/" + o.id, AckIds: ack}); err != nil {
			t.Fatal(err)
		}
	}
}

// published counts the messages pstest holds per topic ID.
func published(srv *pstest.Server) map[string]int {
	pstestMu.Lock()
	defer pstestMu.Unlock()
	out := map[string]int{}
	for _, m := range srv.Messages() {
		out[strings.TrimPrefix(m.Topic, "projects/"+project+"/topics/")]++
	}
	return out
}

func runPubSubConsumer(t *testing.T, tr transport.Transport, qc lily.QueueConfig, h lily.Handler) (stop func()) {
	t.Helper()
	c, err := lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 8, ReceiveWait: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return transporttest.Start(t, c)
}

// TestRedriveReachesTheFailingSubscriptionAlone runs Lily's subscription
// beside another subscription of the same topic. A third of the messages
// fail for Lily; their dead letters are ingested, one is redirected to a
// quarantine queue (whose topic has another subscription too) and the rest
// are redriven. Lily's subscription gets each redriven message back —
// body and attributes as they were — and the quarantine's the redirected
// one; the other subscriptions read each original exactly once and
// nothing of the redrive (nothing was published to either main topic).
// It ends with conservation: every message acked or redirected, every
// entry redriven, the ledger balanced with nothing in flight.
func TestRedriveReachesTheFailingSubscriptionAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	tr := open(t, srv, withCount(srv), func(o *pubsub.Options) { o.AckDeadline = 10 * time.Second })
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	qc := lily.QueueConfig{Name: "alone.orders." + suffix, Transport: lily.TransportPubSub}.WithDefaults()
	qq := lily.QueueConfig{Name: "alone.quarantine." + suffix, Transport: lily.TransportPubSub}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec(), qq.Spec()}}); err != nil {
		t.Fatal(err)
	}
	other := subscribeOther(t, srv, qc.Name, "analytics.orders."+suffix)
	otherQ := subscribeOther(t, srv, qq.Name, "analytics.quarantine."+suffix)

	const n = 12
	msgs := make([]lily.Message, n)
	sent := map[string]lily.Message{}
	bad := map[string]bool{}
	for i := range msgs {
		msgs[i] = lily.Message{EventID: fmt.Sprintf("evt-%s-%02d", suffix, i), Type: "order.created",
			Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Headers: transport.Headers{"tenant": "acme", "x-seq": int32(i)}}
		sent[msgs[i].EventID] = msgs[i]
		bad[msgs[i].EventID] = i%3 == 0
	}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	var mu sync.Mutex
	handled := map[string][]*lily.Delivery{} // queue → deliveries acked
	var failed atomic.Int64
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if bad[d.EventID] && !fixed.Load() {
			failed.Add(1)
			return lily.Permanent(errors.New("schema v2 not supported"))
		}
		mu.Lock()
		handled[d.Queue] = append(handled[d.Queue], d)
		mu.Unlock()
		return nil
	})
	acked := func(queue string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled[queue])
	}
	stop := runPubSubConsumer(t, acc, qc, handler)
	transporttest.WaitFor(t, "the good messages acked", func() bool { return acked(qc.Name) == n-n/3 && failed.Load() == n/3 })
	stop()
	transporttest.WaitFor(t, "the dead letters ingested", func() bool {
		_, err := store.Ingest(ctx, tr, qc.Name)
		return err == nil && len(entries(t, store, qc.Name)) == n/3
	})
	es := entries(t, store, qc.Name)
	fixed.Store(true)
	target := func(context.Context, string) (redrive.Publisher, error) { return acc, nil }
	res, err := redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{IDs: []int64{es[0].ID}}, To: qq.Name, Actor: "test", Target: target})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redirect: %+v (%v)", res, err)
	}
	res, err = redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: qc.Name}, Actor: "test", Target: target})
	if err != nil || res.Redriven != n/3-1 {
		t.Fatalf("redrive: %+v (%v)", res, err)
	}
	stop = runPubSubConsumer(t, acc, qc, handler)
	stopQ := runPubSubConsumer(t, acc, qq, handler)
	transporttest.WaitFor(t, "the redriven messages acked on Lily's subscription, the redirected one on the quarantine's", func() bool {
		return acked(qc.Name) == n-1 && acked(qq.Name) == 1
	})
	stop()
	stopQ()

	// Nothing of the redrive went through either main topic, so no other
	// subscription of them can see it; each read every original once.
	if pub := published(srv); pub[qc.Name] != n || pub[qq.Name] != 0 {
		t.Errorf("published to %s: %d, to %s: %d; want the %d originals and nothing: a redrive went through a topic every subscription reads",
			qc.Name, pub[qc.Name], qq.Name, pub[qq.Name], n)
	}
	seen := other.drain(t)
	for id := range sent {
		if seen[id] != 1 {
			t.Errorf("the other subscription read %s %d times, want once", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("the other subscription read %d event IDs (%v), want the %d originals", len(seen), seen, n)
	}
	if got := otherQ.drain(t); len(got) != 0 {
		t.Errorf("the quarantine topic's other subscription read %v, want nothing", got)
	}

	// Bytes and attributes as they were; the redrive counted.
	mu.Lock()
	redriven := 0
	for q, ds := range handled {
		for _, d := range ds {
			m := sent[d.EventID]
			if string(d.Body) != string(m.Body) || d.Type != m.Type || d.Headers["tenant"] != "acme" || d.Headers["x-seq"] != m.Headers["x-seq"] {
				t.Errorf("%s on %s: body %q type %q headers %v, want %q %q %v", d.EventID, q, d.Body, d.Type, d.Headers, m.Body, m.Type, m.Headers)
			}
			want := 0
			if bad[d.EventID] {
				want = 1
			}
			if d.RedriveCount != want || d.RetryCount != 0 {
				t.Errorf("%s on %s: redrive count %d retry count %d, want %d and 0", d.EventID, q, d.RedriveCount, d.RetryCount, want)
			}
			redriven += d.RedriveCount
		}
	}
	mu.Unlock()
	if redriven != n/3 {
		t.Errorf("%d redriven deliveries acked, want %d", redriven, n/3)
	}

	// Conservation.
	for _, e := range entries(t, store, qc.Name) {
		if e.State != catalog.StateRedriven {
			t.Errorf("entry %s is %s, want redriven", e.EventID, e.State)
		}
	}
	rows, err := ledger.New(store).Rows(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ledger.Row{
		qc.Name: {Accepted: n, Acked: n - 1, Redirected: 1},
		qq.Name: {Accepted: 1, Acked: 1},
	}
	for _, r := range rows {
		w, ok := want[r.Queue]
		if !ok {
			continue
		}
		delete(want, r.Queue)
		if !r.Balanced() || r.InFlight != 0 || r.Accepted != w.Accepted || r.Acked != w.Acked || r.Redirected != w.Redirected || r.DeadLettered != 0 {
			t.Errorf("ledger %+v, want balanced: accepted %d = acked %d + redirected %d, nothing in flight", r, w.Accepted, w.Acked, w.Redirected)
		}
	}
	for q := range want {
		t.Errorf("no ledger row for %s", q)
	}
}

// TestForeignRedriveReachesTheFailingSubscriptionAlone redrives dead
// letters forwarded by Pub/Sub's dead-letter policy
// (CloudPubSubDeadLetterSource*) into Lily's dead-letter topic: one that
// failed in the queue's own subscription goes to its retry-return topic;
// one that failed in another subscription Lily does not consume (no
// retry-return subscription) is refused — its topic would reach every
// subscription — and stays pending, nothing published anywhere.
func TestForeignRedriveReachesTheFailingSubscriptionAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	tr := open(t, srv)
	qc := lily.QueueConfig{Name: fmt.Sprintf("alone.foreign.%08x", rand.Uint32()), Transport: lily.TransportPubSub}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	other := subscribeOther(t, srv, qc.Name, "billing."+qc.Name)
	forwarded := func(id, sub string) {
		srv.Publish("projects/"+project+"/topics/"+pubsub.DeadLetterTopic(qc.Name), []byte("body of "+id), map[string]string{
			evidence.HeaderEventID: id, "tenant": "acme",
			pubsub.AttrDLSourceSubscription: sub, pubsub.AttrDLSourceSubscriptionProject: project,
			pubsub.AttrDLSourceDeliveryCount: "7", pubsub.AttrDLSourceTopicPublishTime: "2026-11-30T10:00:00.123456Z",
		})
	}
	forwarded("ours", qc.Name)
	forwarded("theirs", other.id)
	store := openCatalog(t)
	if n, err := store.Ingest(ctx, tr, qc.Name); err != nil || n != 2 {
		t.Fatalf("ingest %d (%v), want 2", n, err)
	}
	before := published(srv)
	target := func(context.Context, string) (redrive.Publisher, error) { return tr, nil }
	res, err := redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{EventIDs: []string{"ours"}}, Actor: "test", Target: target})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive of the queue's own dead letter: %+v (%v)", res, err)
	}
	res, err = redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{EventIDs: []string{"theirs"}}, Actor: "test", Target: target})
	if err == nil || res.Redriven != 0 || !strings.Contains(err.Error(), other.id) || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("redrive of %s's dead letter: %+v (%v), want it refused naming the subscription and the way out", other.id, res, err)
	}
	after := published(srv)
	ret := pubsub.ReturnTopic(qc.Name)
	if after[ret]-before[ret] != 1 || after[qc.Name] != before[qc.Name] || len(after) != len(before)+boolInt(before[ret] == 0) {
		t.Errorf("published before %v, after %v: want one message more, on %s alone", before, after, ret)
	}
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 2, Wait: 5 * time.Second, Consumer: "c"})
	if err != nil || len(ds) != 1 || ds[0].EventID != "ours" || string(ds[0].Body) != "body of ours" || ds[0].Headers["tenant"] != "acme" {
		t.Fatalf("received %d (%v), want the redriven message alone, body and attributes kept", len(ds), err)
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	if got := other.drain(t); len(got) != 0 {
		t.Errorf("%s read %v, want nothing", other.id, got)
	}
	states := map[string]catalog.State{}
	for _, e := range entries(t, store, qc.Name) {
		states[e.EventID] = e.State
	}
	if states["ours"] != catalog.StateRedriven || states["theirs"] != catalog.StatePending || len(states) != 2 {
		t.Errorf("entry states %v, want ours redriven and theirs pending", states)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
