package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A quorum queue answers a passive queue.declare with its ready messages
// and consumers as its Raft leader counts them, and gives the leader
// quorumStatTimeout to answer (rabbit_quorum_queue:stat/1, 250 ms). A
// leader that is busier than that — a loaded broker, a CI machine — makes
// the broker answer 0 messages and 0 consumers instead: an empty, idle
// queue, indistinguishable from a real one but for the time the answer
// took. Trusted, that zero let 'lily consume --exit-when-idle' stop with 8
// of 30 messages still ready and a test stop its consumers with one left.
//
// So a 0/0 answer counts only when it came back sooner than the broker's
// wait: a timed-out count cannot have. A slower one is asked again, up to
// statAttempts times; then the count is unknown (errCountUnknown), never
// taken as zero.

// quorumStatTimeout is how long RabbitMQ waits for a quorum queue's leader
// to count before it answers zero.
const quorumStatTimeout = 250 * time.Millisecond

// statAttempts is how many slow 0/0 answers are asked again before the
// count is unknown.
const statAttempts = 5

// errCountUnknown: the broker's count may have timed out on every attempt.
var errCountUnknown = errors.New("the broker's count may have timed out")

// stat returns the ready messages and the consumers of queue (AMQP
// queue.declare passive on a throw-away channel, since a missing queue
// closes the channel), exact at the moment of asking, or an error wrapping
// errCountUnknown when every answer was a zero that may have timed out.
func (t *Transport) stat(ctx context.Context, queue string) (ready int64, consumers int, err error) {
	ch, _, err := t.channel(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer ch.Close()
	return statLoop(ctx, queue, func() (amqp.Queue, time.Duration, error) {
		began := time.Now()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return q, time.Since(began), err
	})
}

// statLoop asks declare (a passive declare, and how long its answer took)
// until an answer can be trusted: see stat.
func statLoop(ctx context.Context, queue string, declare func() (amqp.Queue, time.Duration, error)) (int64, int, error) {
	var slowest time.Duration
	for range statAttempts {
		q, took, err := declare()
		if err != nil {
			return 0, 0, fmt.Errorf("rabbitmq: inspect queue %s: %w", queue, err)
		}
		if q.Messages > 0 || q.Consumers > 0 || took < quorumStatTimeout {
			return int64(q.Messages), q.Consumers, nil
		}
		slowest = max(slowest, took)
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("rabbitmq: inspect queue %s: %w", queue, err)
		}
	}
	return 0, 0, fmt.Errorf("rabbitmq: inspect queue %s: %d answers of 0 messages and 0 consumers, each after %v or more (up to %v): "+
		"a quorum queue answers that when its leader does not count within %v, so the queue may hold messages; ask again once the broker is less busy: %w",
		queue, statAttempts, quorumStatTimeout, slowest.Round(time.Millisecond), quorumStatTimeout, errCountUnknown)
}

// ready returns the number of ready messages in a queue (see stat).
func (t *Transport) ready(ctx context.Context, queue string) (int64, error) {
	n, _, err := t.stat(ctx, queue)
	return n, err
}
