package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

func declare(t testing.TB, tr *kafka.Transport, qc lily.QueueConfig) {
	t.Helper()
	if err := tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
}

// receiveOne receives until one delivery comes.
func receiveOne(t *testing.T, tr *kafka.Transport, queue, consumer string) *transport.Delivery {
	t.Helper()
	var d *transport.Delivery
	transporttest.WaitFor(t, consumer+" to receive", func() bool {
		ds, err := tr.Receive(context.Background(), &transport.ReceiveParams{Queue: queue, Max: 1, Wait: 50 * time.Millisecond, Consumer: consumer})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(ds) > 0 {
			d = ds[0]
		}
		return d != nil
	})
	return d
}

// TestCountSurvivesRebalance lets a record move between group members in
// separate transports (separate processes, as far as the count is
// concerned): each member that takes it over after the previous holder
// died hands it out with the count raised.
func TestCountSurvivesRebalance(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.NumBrokers(1))
	qc := lily.QueueConfig{Name: fmt.Sprintf("rebalance.count.%08x", rand.Uint32()), Transport: lily.TransportKafka}.WithDefaults()
	setup := open(t, c, func(o *kafka.Options) { o.Partitions = 1 })
	declare(t, setup, qc)
	if err := lily.Publish(context.Background(), setup, qc.Name, []lily.Message{{Body: []byte("kills its consumer")}}); err != nil {
		t.Fatal(err)
	}
	a := open(t, c)
	d := receiveOne(t, a, qc.Name, "a")
	if d.DeliveryCount != 1 {
		t.Fatalf("first delivery count %d", d.DeliveryCount)
	}
	// b joins while a holds the partition, and gets it when a dies.
	b := open(t, c)
	got := make(chan *transport.Delivery, 1)
	go func() { got <- receiveOne(t, b, qc.Name, "b") }()
	transporttest.WaitForState(t, "b to join a's group", func() (bool, string) {
		gi := c.GroupInfo(kafka.DefaultGroup(qc.Name))
		if gi == nil {
			return false, "no group"
		}
		return len(gi.Members) == 2, fmt.Sprintf("%d members, state %s", len(gi.Members), gi.State)
	})
	if _, err := a.RecoverLeases(context.Background(), &transport.RecoverParams{Consumer: "a"}); err != nil {
		t.Fatal(err)
	}
	d = <-got
	if d.DeliveryCount != 2 {
		t.Fatalf("delivery count %d after the holder died, want 2", d.DeliveryCount)
	}
	if _, err := b.RecoverLeases(context.Background(), &transport.RecoverParams{Consumer: "b"}); err != nil {
		t.Fatal(err)
	}
	c3 := open(t, c)
	d = receiveOne(t, c3, qc.Name, "c")
	if d.DeliveryCount != 3 {
		t.Fatalf("delivery count %d on the third member, want 3", d.DeliveryCount)
	}
	if err := c3.Settle(context.Background(), &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	if err := c3.StopConsumer(context.Background(), &transport.StopParams{Queue: qc.Name, Consumer: "c"}); err != nil {
		t.Fatal(err)
	}
	if n, err := c3.InFlight(context.Background(), qc.Name); err != nil || n != 0 {
		t.Errorf("in flight %d (%v), want 0", n, err)
	}
}

// TestRevokeWaitsForSettlement: when a partition moves to a new member,
// the old one gets RevokeTimeout to settle what it handed out. Settled in
// time, its offsets are committed before the partition moves and nothing
// is delivered twice; not settled in time, the deliveries become void
// (ErrLeaseLost) and the new owner redelivers them, counted.
func TestRevokeWaitsForSettlement(t *testing.T) {
	for _, settleInTime := range []bool{true, false} {
		t.Run(fmt.Sprintf("settled=%v", settleInTime), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := newCluster(t, kfake.NumBrokers(1))
			qc := lily.QueueConfig{Name: fmt.Sprintf("rebalance.revoke.%08x", rand.Uint32()), Transport: lily.TransportKafka}.WithDefaults()
			a := open(t, c, func(o *kafka.Options) {
				o.Partitions = 2
				if !settleInTime {
					o.RevokeTimeout = time.Second // runs out: the test waits for it
				}
			})
			declare(t, a, qc)
			msgs := make([]lily.Message, 20)
			for i := range msgs {
				msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i), Body: []byte{byte(i)}}
			}
			if err := lily.Publish(ctx, a, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			var held []*transport.Delivery
			transporttest.WaitFor(t, "a to receive everything", func() bool {
				ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 100, Wait: 50 * time.Millisecond, Consumer: "a"})
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, ds...)
				return len(held) == len(msgs)
			})
			b := open(t, c)
			var mu sync.Mutex
			var atB []*transport.Delivery
			stopB := make(chan struct{})
			doneB := make(chan struct{})
			go func() {
				defer close(doneB)
				for {
					select {
					case <-stopB:
						return
					default:
					}
					ds, err := b.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 100, Wait: 50 * time.Millisecond, Consumer: "b"})
					if err != nil {
						t.Errorf("b receive: %v", err)
						return
					}
					mu.Lock()
					atB = append(atB, ds...)
					mu.Unlock()
				}
			}()
			var ss []transport.Settlement
			for _, d := range held {
				ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			var atA []*transport.Delivery // a's markers, settled at the end
			if settleInTime {
				// b's join revokes a partition of a's, and the revoke waits
				// for a's hand-outs: a settles while it waits.
				transporttest.WaitForState(t, "a to give up a partition for b", func() (bool, string) {
					n, revocations := kafka.Revoking(a, qc.Name, "a")
					return n > 0, fmt.Sprintf("%d partitions revoking, %d revocations", n, revocations)
				})
				if err := a.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
					t.Fatalf("settle within the revoke timeout: %v", err)
				}
				// Markers published now come after everything a settled, in
				// both partitions: once a and b have them all, b has read its
				// partition past whatever it would have delivered twice.
				markers := make([]lily.Message, len(msgs))
				for i := range markers {
					markers[i] = lily.Message{Key: fmt.Sprintf("k%d", i), Body: []byte("marker")}
				}
				if err := lily.Publish(ctx, a, qc.Name, markers); err != nil {
					t.Fatal(err)
				}
				transporttest.WaitForState(t, "a and b to receive every marker", func() (bool, string) {
					ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 100, Wait: 50 * time.Millisecond, Consumer: "a"})
					if err != nil {
						t.Fatal(err)
					}
					atA = append(atA, ds...)
					mu.Lock()
					nb := countMarkers(atB)
					mu.Unlock()
					na := countMarkers(atA)
					return na+nb == len(markers), fmt.Sprintf("a %d, b %d of %d markers", na, nb, len(markers))
				})
				mu.Lock()
				for _, d := range atB {
					if string(d.Body) != "marker" {
						t.Errorf("b received %q, a record that a settled in time: delivered twice", d.Body)
					}
				}
				mu.Unlock()
				for _, d := range atA {
					if string(d.Body) != "marker" {
						t.Errorf("a received %q again after settling it", d.Body)
					}
				}
				gi := c.GroupInfo(kafka.DefaultGroup(qc.Name))
				if gi == nil || len(gi.Members) != 2 {
					t.Fatalf("group %+v, want two members", gi)
				}
				for _, m := range gi.Members {
					if len(m.Assignment[qc.Name]) != 1 {
						t.Errorf("member %s assigned %v: the partition did not move, the test proves nothing", m.MemberID, m.Assignment)
					}
				}
			} else {
				transporttest.WaitFor(t, "b to take over a partition", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(atB) > 0
				})
				mu.Lock()
				for _, d := range atB {
					if d.DeliveryCount != 2 {
						t.Errorf("taken-over delivery count %d, want 2", d.DeliveryCount)
					}
				}
				moved := map[string]bool{}
				for _, d := range atB {
					moved[d.EventID] = true
				}
				mu.Unlock()
				errs := transport.SettleErrors(a.Settle(ctx, &transport.SettleParams{Settlements: ss}), len(ss))
				for i, d := range held {
					if moved[d.EventID] && !errors.Is(errs[i], transport.ErrLeaseLost) {
						t.Errorf("a settled %s after its partition moved: %v, want ErrLeaseLost", d.EventID, errs[i])
					}
				}
			}
			close(stopB)
			<-doneB
			mu.Lock()
			var bs []transport.Settlement
			for _, d := range atB {
				bs = append(bs, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			mu.Unlock()
			if err := b.Settle(ctx, &transport.SettleParams{Settlements: bs}); err != nil {
				t.Fatal(err)
			}
			var as []transport.Settlement
			for _, d := range atA {
				as = append(as, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			if err := a.Settle(ctx, &transport.SettleParams{Settlements: as}); err != nil {
				t.Fatal(err)
			}
			a.StopConsumer(ctx, &transport.StopParams{Queue: qc.Name, Consumer: "a"})
			b.StopConsumer(ctx, &transport.StopParams{Queue: qc.Name, Consumer: "b"})
			if n, err := a.InFlight(ctx, qc.Name); err != nil || n != 0 {
				t.Errorf("in flight %d (%v), want 0", n, err)
			}
		})
	}
}

// countMarkers counts the deliveries whose body is "marker".
func countMarkers(ds []*transport.Delivery) int {
	n := 0
	for _, d := range ds {
		if string(d.Body) == "marker" {
			n++
		}
	}
	return n
}
