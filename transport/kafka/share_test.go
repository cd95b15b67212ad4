package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// shareLock is the acquisition lock of the share-group test clusters:
// short, so that the slow-handler behaviours outlive it and must renew,
// but not so short that a renewal (every fifth of it) delayed by a loaded
// CI machine lets it run out — that raises a count where the hanging-
// dependency behaviour requires none (seen once with 1 s under the whole
// suite). The member session (6 s) is long for the same reason: a member
// whose session expires gives its records back with their counts raised.
const shareLock = 2 * time.Second

// newShareCluster starts kfake with share groups whose archive limit is
// the broker default (5) and whose lock is shareLock.
func newShareCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	return newCluster(t, append([]kfake.Opt{kfake.BrokerConfigs(map[string]string{
		kafka.BrokerShareLockDuration:       fmt.Sprint(shareLock.Milliseconds()),
		"group.share.heartbeat.interval.ms": "200",
		"group.share.session.timeout.ms":    "6000",
	})}, opts...)...)
}

// shareOptions point a transport's share groups at the test lock (or at
// the crash test's, in its child processes).
func shareOptions(o *kafka.Options) {
	o.ShareLockDuration = shareLock
	if d, err := time.ParseDuration(os.Getenv(crashChildShareLock)); err == nil {
		o.ShareLockDuration = d
	}
}

// crashChildShareLock passes the crash test's lock to its children.
const crashChildShareLock = "LILY_KAFKA_CRASH_SHARE_LOCK"

// crashShareLock is the crash test's lock: longer than shareLock, so that
// a child slowed by the machine renews in time (a lock that runs out
// raises the counts of what the child held, the poison's neighbours too).
const crashShareLock = 5 * time.Second

// shareHarness runs the suite's queues through share groups (one per
// queue, named after it).
func shareHarness(c *kfake.Cluster) transporttest.Harness {
	h := harness(c)
	h.Name = "kafka"
	h.New = func(t *testing.T) transport.Transport { return open(t, c, shareOptions) }
	h.Lease = shareLock
	h.Configure = func(q *lily.QueueConfig) { q.KafkaShareGroup = "share." + q.Name }
	return h
}

// TestShareConformance runs the conformance suite with every queue
// consumed through a share group.
func TestShareConformance(t *testing.T) {
	transporttest.Run(t, shareHarness(newShareCluster(t)))
}

// TestShareLoad runs the real-traffic behaviours (competing members of one
// share group, slow handlers past the lock, a hanging dependency, a
// dead-lettered probe, a graceful hand-over) through share groups.
func TestShareLoad(t *testing.T) {
	transporttest.RunLoad(t, shareHarness(newShareCluster(t)))
}

// TestShareCrashTypePoison runs a consumer subprocess, a member of the
// queue's share group, that calls os.Exit on one record, restarts it each
// time it dies, and checks that the broker's own delivery count bounds the
// poison: it is dead-lettered by Lily with reason delivery_limit and the
// broker's count (delivery_limit + 1, below the broker's archive limit of
// 5) after delivery_limit deaths, while every other record is processed —
// none archived, none dead-lettered with it.
func TestShareCrashTypePoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t, kfake.BrokerConfigs(map[string]string{kafka.BrokerShareLockDuration: fmt.Sprint(crashShareLock.Milliseconds())}))
	tr := open(t, c, shareOptions)
	name := fmt.Sprintf("crash.share.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(3), KafkaShareGroup: group}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 30)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i%6), Body: []byte(fmt.Sprintf("order-%d", i))}
	}
	const poison = 13
	msgs[poison].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashChildren(t, crashChildBrokers+"="+strings.Join(c.ListenAddrs(), ","),
		crashChildQueue+"="+qc.Name, crashChildLog+"="+logPath, crashChildShare+"="+group, crashChildShareLock+"="+crashShareLock.String())
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	dls, err := tr.DeadLetters(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID || string(dls[0].Body) != "poison" {
		for _, d := range dls {
			r, _ := evidence.Decode(d.Headers)
			t.Logf("DL %s %s reason %s count %d", d.EventID, d.Body, r.Reason, r.DeliveryCount)
		}
		t.Fatalf("dead-letter topic holds %d records, want exactly the poison", len(dls))
	}
	rec, err := evidence.Decode(dls[0].Headers)
	if err != nil {
		t.Errorf("evidence: %v", err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != qc.Settings().DeliveryLimit+1 {
		t.Errorf("reason %q delivery count %d, want delivery_limit and the broker's count %d", rec.Reason, rec.DeliveryCount, qc.Settings().DeliveryLimit+1)
	}
	if !rec.HasPartition || !rec.HasOffset || rec.SourcePartition != dls[0].Partition {
		t.Errorf("dead letter source %d/%d (has %v/%v) in DLT partition %d: want the poison's coordinates and the same partition",
			rec.SourcePartition, rec.SourceOffset, rec.HasPartition, rec.HasOffset, dls[0].Partition)
	}
	// Conservation: every message but the poison processed, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
	t.Logf("poison at %d/%d; %d restarts", rec.SourcePartition, rec.SourceOffset, restarts)
}

// TestShareDeliveryLimitNotBelowBroker checks that a share-group queue whose
// delivery_limit is not below the broker's archive limit is refused as
// unsafe (the broker would archive a crash-type poison record, silently,
// before Lily dead-letters it), naming the values and the fix, and that the
// consumer stops with that error instead of consuming.
func TestShareDeliveryLimitNotBelowBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t, kfake.BrokerConfigs(map[string]string{kafka.BrokerShareDeliveryLimit: "3"}))
	tr := open(t, c, shareOptions)
	name := fmt.Sprintf("share.unsafe.%08x", rand.Uint32())
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(3), KafkaShareGroup: "share." + name}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	s, err := tr.ShareSettings(ctx, qc.KafkaShareGroup)
	if err != nil || s.DeliveryLimit != 3 || s.DeliveryLimitSource != "broker" {
		t.Fatalf("ShareSettings = %+v, %v; want the broker's limit 3", s, err)
	}
	_, err = tr.Receive(ctx, &transport.ReceiveParams{Queue: name, Max: 1, Consumer: "c1"})
	if !errors.Is(err, transport.ErrUnsafeQueue) {
		t.Fatalf("Receive = %v, want ErrUnsafeQueue", err)
	}
	for _, want := range []string{"delivery_limit 3", "delivery limit 3", "set delivery_limit to at most 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	cons, err := lily.NewConsumer(tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error { return nil }),
		lily.ConsumerOptions{Queue: qc, Instance: "c2", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cons.Run(rctx); !errors.Is(err, transport.ErrUnsafeQueue) {
		t.Errorf("Run = %v, want it to stop with ErrUnsafeQueue", err)
	}
}

// TestShareArchivedIsLost checks the worst loss mode of share groups: a
// record that another member of the group keeps releasing is archived by
// the broker at its delivery limit, without any copy. The ledger must not
// count it as acked or in flight: it shows as lost, and reconcile fails.
func TestShareArchivedIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t, kfake.BrokerConfigs(map[string]string{kafka.BrokerShareDeliveryLimit: "2"}))
	tr := open(t, c, shareOptions)
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	name := fmt.Sprintf("share.archived.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(1), KafkaShareGroup: group}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, acc, name, []lily.Message{{Body: []byte("doomed")}}); err != nil {
		t.Fatal(err)
	}
	ledgerNow := func() ledger.Row {
		t.Helper()
		rows, err := ledger.New(store).Rows(ctx, tr)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == name {
				return r
			}
		}
		t.Fatalf("no ledger row for %s", name)
		return ledger.Row{}
	}
	if r := ledgerNow(); !r.Balanced() || r.InFlight != 1 {
		t.Fatalf("before: ledger %+v, want balanced with 1 in flight", r)
	}
	// A member outside Lily (a foreign consumer in the same share group)
	// releases the record every time, until the broker archives it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(name), kgo.ShareGroup(group), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for releases := 0; releases < 2 && pctx.Err() == nil; {
		for _, r := range cl.PollRecords(pctx, -1).Records() {
			r.Ack(kgo.AckRelease)
			releases++
		}
		if err := cl.FlushAcks(pctx); err != nil {
			t.Fatal(err)
		}
	}
	var r ledger.Row
	transporttest.WaitForState(t, "the archived record out of the ledger's in flight", func() (bool, string) {
		r = ledgerNow()
		return r.InFlight == 0, fmt.Sprintf("%+v", r)
	})
	if r.InFlight != 0 || r.Acked != 0 || r.Lost != 1 || r.Balanced() {
		t.Errorf("after the broker archived the record: ledger %+v, want 0 in flight, 0 acked, 1 lost", r)
	}
}

// TestShareMembersSplitAPartition runs four consumers, four members of one
// share group, on a topic with a single partition — what a consumer group
// cannot do (one member per partition) and what share groups exist for —
// and checks that every member handles records, that handler calls equal
// messages (no duplicate, no redelivery), and that nothing is left in
// flight.
func TestShareMembersSplitAPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t)
	tr := open(t, c, shareOptions, func(o *kafka.Options) { o.Partitions = 1; o.ShareMaxRecords = 8 })
	name := fmt.Sprintf("share.split.%08x", rand.Uint32())
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, KafkaShareGroup: "share." + name}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("job-%d", i))}
	}
	if err := lily.Publish(ctx, tr, name, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls, byMember, recounted := map[string]int{}, map[string]int{}, 0
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		member := fmt.Sprintf("member-%d", i)
		cons, err := lily.NewConsumer(tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
			time.Sleep(5 * time.Millisecond) // simulates a handler's work, so that members overlap
			mu.Lock()
			defer mu.Unlock()
			calls[d.EventID]++
			byMember[member]++
			if d.DeliveryCount > 1 {
				recounted++
			}
			if len(calls) == n {
				cancel()
			}
			return nil
		}), lily.ConsumerOptions{Queue: qc, Instance: member, Concurrency: 2, ReceiveWait: 50 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cons.Run(rctx); err != nil {
				t.Errorf("%s: %v", member, err)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for id, k := range calls {
		total += k
		if k != 1 {
			t.Errorf("%s handled %d times", id, k)
		}
	}
	if len(calls) != n || total != n || recounted != 0 {
		t.Errorf("%d distinct records, %d handler calls, %d redeliveries; want %d, %d, 0", len(calls), total, recounted, n, n)
	}
	if len(byMember) != 4 {
		t.Errorf("records per member %v: want all four members of the share group to take part in the one partition", byMember)
	}
	if got, err := tr.InFlight(ctx, name); err != nil || got != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", got, err)
	}
	t.Logf("records per member: %v", byMember)
}
