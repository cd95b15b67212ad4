package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// otherGroup is another team's consumer group (an indexer, an analytics
// sink) on the same topics as Lily's queues: it counts every record it
// reads by topic and event ID.
type otherGroup struct {
	mu   sync.Mutex
	seen map[string]map[string]int // topic → event ID → records
	n    int
}

// readOtherGroup starts consumer group group on topics until the test
// ends.
func readOtherGroup(t *testing.T, c *kfake.Cluster, group string, topics ...string) *otherGroup {
	t.Helper()
	g := &otherGroup{seen: map[string]map[string]int{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100e6))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				id := ""
				for _, h := range r.Headers {
					if h.Key == evidence.HeaderEventID {
						id = string(h.Value)
					}
				}
				g.mu.Lock()
				if g.seen[r.Topic] == nil {
					g.seen[r.Topic] = map[string]int{}
				}
				g.seen[r.Topic][id]++
				g.n++
				g.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return g
}

func (g *otherGroup) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// records returns the number of records of topic (its end offsets).
func records(t *testing.T, tr *kafka.Transport, topic string) int64 {
	t.Helper()
	ends, err := kadm.NewClient(tr.Client()).ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// TestRedriveReachesTheFailingGroupAlone runs Lily's consumer group beside
// another consumer group on the same topic. A third of the messages fail
// for Lily; their dead letters are ingested, one is redirected to a
// quarantine queue (whose topic the other group reads too) and the rest
// are redriven. Lily's group gets each redriven message back — bytes and
// headers as they were — and the quarantine's Lily group gets the
// redirected one; the other group reads each original exactly once and
// nothing of the redrive (no record was added to either main topic). It
// ends with conservation: every message acked or redirected, every entry
// redriven, the ledger balanced with nothing in flight.
func TestRedriveReachesTheFailingGroupAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	tr := open(t, c)
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	qc := lily.QueueConfig{Name: "alone.orders." + suffix, Transport: lily.TransportKafka}.WithDefaults()
	qq := lily.QueueConfig{Name: "alone.quarantine." + suffix, Transport: lily.TransportKafka}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec(), qq.Spec()}}); err != nil {
		t.Fatal(err)
	}
	other := readOtherGroup(t, c, "analytics."+suffix, qc.Name, qq.Name)

	const n = 12
	msgs := make([]lily.Message, n)
	sent := map[string]lily.Message{}
	bad := map[string]bool{}
	for i := range msgs {
		msgs[i] = lily.Message{EventID: fmt.Sprintf("evt-%s-%02d", suffix, i), Key: fmt.Sprintf("cust-%d", i), Type: "order.created",
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
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if bad[d.EventID] && !fixed.Load() {
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
	stop := runConsumer(t, acc, qc, handler)
	transporttest.WaitFor(t, "the good messages acked, the bad ones dead-lettered", func() bool {
		depth, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && depth == n/3 && acked(qc.Name) == n-n/3
	})
	stop()
	if got, err := store.Ingest(ctx, tr, qc.Name); err != nil || got != n/3 {
		t.Fatalf("ingest %d (%v), want %d", got, err, n/3)
	}
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
	stop = runConsumer(t, acc, qc, handler)
	stopQ := runConsumer(t, acc, qq, handler)
	transporttest.WaitFor(t, "the redriven messages acked by Lily's group, the redirected one by the quarantine's", func() bool {
		return acked(qc.Name) == n-1 && acked(qq.Name) == 1
	})
	stop()
	stopQ()

	// The redrive reached Lily's groups alone: not one record was added to
	// either main topic, so no other group of them can see it.
	if got := records(t, tr, qc.Name); got != n {
		t.Errorf("%s holds %d records, want the %d originals: a redrive went through the topic every group reads", qc.Name, got, n)
	}
	if got := records(t, tr, qq.Name); got != 0 {
		t.Errorf("%s holds %d records, want none: the redirect went through the topic every group reads", qq.Name, got)
	}
	transporttest.WaitFor(t, "the other group to read every original", func() bool { return other.count() >= n })
	other.mu.Lock()
	for id := range sent {
		if k := other.seen[qc.Name][id]; k != 1 {
			t.Errorf("the other group read %s %d times, want once", id, k)
		}
	}
	if other.n != n || len(other.seen[qq.Name]) != 0 {
		t.Errorf("the other group read %d records (%v on the quarantine), want the %d originals only", other.n, other.seen[qq.Name], n)
	}
	other.mu.Unlock()

	// Bytes and headers as they were; the redrive counted in the headers.
	mu.Lock()
	redriven := 0
	for q, ds := range handled {
		for _, d := range ds {
			m := sent[d.EventID]
			if string(d.Body) != string(m.Body) || d.Key != m.Key || d.Type != m.Type || d.Headers["tenant"] != "acme" || d.Headers["x-seq"] != m.Headers["x-seq"] {
				t.Errorf("%s on %s: body %q key %q type %q headers %v, want %q %q %q %v", d.EventID, q, d.Body, d.Key, d.Type, d.Headers, m.Body, m.Key, m.Type, m.Headers)
			}
			if want := map[bool]int{true: 1, false: 0}[bad[d.EventID]]; d.RedriveCount != want || d.RetryCount != 0 {
				t.Errorf("%s on %s: redrive count %d retry count %d, want %d and 0", d.EventID, q, d.RedriveCount, d.RetryCount, want)
			}
			if d.RedriveCount > 0 {
				redriven++
			}
		}
	}
	mu.Unlock()
	if redriven != n/3 {
		t.Errorf("%d redriven deliveries acked, want %d", redriven, n/3)
	}

	// Conservation: every entry decided, every message acked (or, for the
	// redirected one, accepted and acked on the quarantine), none in flight.
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
		qc.Name: {Queue: qc.Name, Accepted: n, Acked: n - 1, Redirected: 1},
		qq.Name: {Queue: qq.Name, Accepted: 1, Acked: 1},
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

// TestForeignRedriveReachesTheFailingGroupAlone redrives Spring Kafka dead
// letters (DeadLetterPublishingRecoverer's headers, the partition a
// 4-byte big-endian int): one whose failing group is the origin topic's
// Lily group goes to that topic's return topic, in the partition its
// evidence names (not the key's); one whose failing group is another
// team's is refused — no topic reaches that group alone, and the origin
// topic would reach every group — and stays pending, with nothing
// produced anywhere.
func TestForeignRedriveReachesTheFailingGroupAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	origin := lily.QueueConfig{Name: "spring.origin." + suffix, Transport: lily.TransportKafka}.WithDefaults()
	dlt := origin.Name + ".DLT"
	tr := open(t, c, func(o *kafka.Options) { o.DeadLetterTopics = map[string]string{origin.Name: dlt} })
	declare(t, tr, origin)
	const parts = 3
	keyPart := int32(kgo.StickyKeyPartitioner(nil).ForTopic(origin.Name).Partition(&kgo.Record{Key: []byte("acct-9")}, parts))
	springPart := (keyPart + 1) % parts
	spring := func(id, group string) *kgo.Record {
		return &kgo.Record{Topic: dlt, Key: []byte("acct-9"), Value: []byte(`{"account":9}`), Headers: []kgo.RecordHeader{
			{Key: evidence.HeaderEventID, Value: []byte(id)},
			{Key: "kafka_dlt-original-topic", Value: []byte(origin.Name)},
			{Key: "kafka_dlt-original-partition", Value: binary.BigEndian.AppendUint32(nil, uint32(springPart))},
			{Key: "kafka_dlt-original-offset", Value: binary.BigEndian.AppendUint64(nil, 42)},
			{Key: "kafka_dlt-original-consumer-group", Value: []byte(group)},
			{Key: "kafka_dlt-exception-fqcn", Value: []byte("java.lang.IllegalStateException")},
			{Key: "kafka_dlt-exception-message", Value: []byte("no such account")},
		}}
	}
	ours, theirs := "ours-"+suffix, "theirs-"+suffix
	if err := tr.Client().ProduceSync(ctx, spring(ours, kafka.DefaultGroup(origin.Name)), spring(theirs, "billing-service")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	store := openCatalog(t)
	if n, err := store.Ingest(ctx, tr, origin.Name); err != nil || n != 2 {
		t.Fatalf("ingest %d (%v), want 2", n, err)
	}
	target := func(context.Context, string) (redrive.Publisher, error) { return tr, nil }
	res, err := redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{EventIDs: []string{ours}}, Actor: "test", Target: target})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive of Lily's group's dead letter: %+v (%v)", res, err)
	}
	res, err = redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{EventIDs: []string{theirs}}, Actor: "test", Target: target})
	if err == nil || res.Redriven != 0 || !strings.Contains(err.Error(), "billing-service") || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("redrive of billing-service's dead letter: %+v (%v), want it refused naming the group and the way out", res, err)
	}
	back, err := tr.Peek(ctx, &kafka.PeekParams{Topic: kafka.ReturnTopic(origin.Name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 1 || back[0].EventID != ours || back[0].Partition != springPart || string(back[0].Body) != `{"account":9}` ||
		fmt.Sprintf("%s", back[0].Headers["kafka_dlt-original-consumer-group"]) != kafka.DefaultGroup(origin.Name) {
		t.Fatalf("return topic holds %d records (%+v), want %s alone in partition %d (the key's is %d), bytes and headers kept", len(back), back, ours, springPart, keyPart)
	}
	if n := records(t, tr, origin.Name); n != 0 {
		t.Errorf("origin topic holds %d records, want none: every group of it would read them", n)
	}
	// Conservation: one entry redriven, the refused one pending as it was.
	states := map[string]catalog.State{}
	for _, e := range entries(t, store, origin.Name) {
		states[e.EventID] = e.State
	}
	if states[ours] != catalog.StateRedriven || states[theirs] != catalog.StatePending || len(states) != 2 {
		t.Errorf("entry states %v, want %s redriven and %s pending", states, ours, theirs)
	}
}
