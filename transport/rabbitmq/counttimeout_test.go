package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// TestTimedOutCountIsNotZero: a quorum queue whose leader does not count
// within 250 ms answers a passive declare with 0 messages and 0 consumers.
// No broker does that on demand, so the answer is forced here (not in
// parallel: it replaces the transport's counts); the consumer and the
// messages are real. While this process consumes from the queue, such an
// answer is asked again and, given twice, is an error rather than an empty
// queue; given once, the second answer is the count.
func TestTimedOutCountIsNotZero(t *testing.T) {
	ctx := context.Background()
	qc := randomQueue("stat", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	rawPublishAll(ctx, t, qc.Name, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	got := receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Wait: 100 * time.Millisecond, Consumer: "c", Prefetch: 1}, 1)

	timedOut := func(n int) func(string, int64, int, error) (int64, int, error) {
		return func(q string, ready int64, consumers int, err error) (int64, int, error) {
			if q == qc.Name && n > 0 {
				n--
				return 0, 0, nil
			}
			return ready, consumers, err
		}
	}
	restore := rabbitmq.AnswerCounts(timedOut(2))
	_, err := tr.InFlightParts(ctx, qc.Name)
	restore()
	if !errors.Is(err, rabbitmq.ErrCountTimedOut) {
		t.Errorf("two 0/0 answers while consuming: %v, want the count unknown (ErrCountTimedOut)", err)
	}

	restore = rabbitmq.AnswerCounts(timedOut(1))
	p, err := tr.InFlightParts(ctx, qc.Name)
	restore()
	// 3 published, 1 held by this process: the rest ready or pushed to it.
	if err != nil || p.Total() != 3 {
		t.Errorf("one 0/0 answer, then the real one: %+v, %v; want the 3 messages counted", p, err)
	}

	for i := range 3 { // prefetch 1: one at a time
		if i > 0 {
			got = receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Wait: 100 * time.Millisecond, Consumer: "c", Prefetch: 1}, 1)
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: got[0], Action: transport.Ack}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.StopConsumer(ctx, &transport.StopParams{Queue: qc.Name, Consumer: "c"}); err != nil {
		t.Fatal(err)
	}
	// No consumer of this process: a 0/0 answer is the count (an empty
	// queue answers the same), and all 3 were acked.
	restore = rabbitmq.AnswerCounts(timedOut(1))
	n, err := tr.InFlight(ctx, qc.Name)
	restore()
	if err != nil || n != 0 {
		t.Errorf("0/0 with no consumer here, every message acked: %d, %v; want 0", n, err)
	}
}
