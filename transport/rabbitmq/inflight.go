package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/lily-mq/lily/transport"
)

var _ transport.InFlightBreakdown = (*Transport)(nil)

// managementTimeout bounds the management API calls of one InFlightParts.
const managementTimeout = 5 * time.Second

// InFlight counts the messages of a queue that are neither acknowledged
// nor dead-lettered (InFlightParts' total).
func (t *Transport) InFlight(ctx context.Context, queue string) (int64, error) {
	p, err := t.InFlightParts(ctx, queue)
	return p.Total(), err
}

// InFlightParts says who holds a queue's in-flight messages:
//
//   - Ready: ready in the queue (AMQP, exact at the moment of asking);
//   - Retrying: ready in its retry buckets (AMQP, exact);
//   - Unacked: delivered and not acknowledged. Without Options.Management
//     (or when its API cannot be reached: logged as a warning) only this
//     process's deliveries are known, and when the queue has consumers
//     Unknown says so: what they hold is neither counted nor lost. With it, every consumer's
//     (messages_unacknowledged of the queue and its buckets), as long as
//     the queue has a consumer (AMQP's consumer count, exact): with none,
//     nothing can be unacknowledged, whatever an older statistics sample
//     says;
//   - DeadLettering: with Options.Management, messages_dlx of the queue
//     and its buckets — messages the broker dead-lettered (at-least-once)
//     that the DLQ has not confirmed yet.
//
// The management API's figures are statistics sampled every
// collect_statistics_interval (5 s by default): for that long after
// deliveries change hands they can be behind, and a reconcile run then can
// show a difference that the next run does not.
func (t *Transport) InFlightParts(ctx context.Context, queue string) (transport.InFlightParts, error) {
	var p transport.InFlightParts
	names := []string{queue}
	if s, err := t.spec(queue); err == nil {
		for _, ms := range s.BucketsMillis {
			names = append(names, BucketQueue(queue, ms))
		}
	}
	consumers := 0
	for i, q := range names {
		count := inspectFn
		if i == 0 { // only the queue itself is consumed: see count
			count = (*Transport).count
		}
		ready, n, err := count(t, ctx, q)
		if err != nil {
			return p, err
		}
		if i == 0 {
			p.Ready = ready
		} else {
			p.Retrying += ready
		}
		consumers += n
	}
	p.Unacked = t.heldCount(queue)
	// Without the management API, what consumers of other processes hold
	// cannot be read: a queue with consumers then has an unknown part.
	unknown := func(why string) {
		if consumers > 0 {
			p.Unknown = fmt.Sprintf("%s; the queue and its buckets have %d consumers, whose unacknowledged deliveries AMQP does not show", why, consumers)
		}
	}
	if t.opts.Management == nil {
		unknown("no management API configured (rabbitmq.Options.Management)")
		return p, nil
	}
	var unacked, dlx int64
	// Bounded: an API behind a firewall that drops packets must not hang
	// reconcile or /healthz.
	mctx, cancel := context.WithTimeout(ctx, managementTimeout)
	defer cancel()
	for _, q := range names {
		var st struct {
			Unacked int64 `json:"messages_unacknowledged"`
			DLX     int64 `json:"messages_dlx"`
		}
		found, err := t.opts.Management.Get(mctx, "/api/queues/"+t.opts.Management.VHostPath()+"/"+url.PathEscape(q), &st)
		if err != nil {
			// Degrade to what AMQP shows, loudly: deliveries held by other
			// processes are then not counted.
			if !t.mgmtWarned.Swap(true) { // once per transport: reconcile and /healthz ask often
				t.opts.Logger.Warn("rabbitmq: management API unreachable: in-flight counts only this process's deliveries; "+
					"deliveries held by consumers in other processes are unknown, not counted", "queue", queue, "err", err)
			}
			unknown("the management API is unreachable: " + err.Error())
			return p, nil
		}
		if found {
			unacked += st.Unacked
			dlx += st.DLX
		}
	}
	if consumers > 0 {
		p.Unacked = max(p.Unacked, unacked)
	}
	p.DeadLettering = dlx
	return p, nil
}

// errCountTimedOut: a queue answered 0 messages and 0 consumers while a
// consumer of this process consumes from it. RabbitMQ gives a quorum
// queue's leader 250 ms to count for a passive queue.declare and answers
// 0 and 0 past it (rabbit_quorum_queue:stat/1); a loaded broker did, and
// 'lily consume --exit-when-idle' stopped with 8 of 30 messages ready.
// The count is unknown then, not zero.
var errCountTimedOut = errors.New("answered 0 messages and 0 consumers while this process consumes from it: " +
	"a quorum queue whose leader does not count within 250 ms answers so (a loaded broker); the count is unknown, ask again")

// inspectFn is inspect, replaced by tests that need a broker's answer no
// real broker gives on demand (a timed-out quorum count).
var inspectFn = (*Transport).inspect

// count is inspect, except that a 0/0 answer while a consumer of this
// process consumes from the queue is impossible: it is asked once more
// and, given again, is errCountTimedOut.
func (t *Transport) count(ctx context.Context, queue string) (int64, int, error) {
	for try := 1; ; try++ {
		ready, n, err := inspectFn(t, ctx, queue)
		if err != nil || ready > 0 || n > 0 || !t.consumingOn(queue) {
			return ready, n, err
		}
		if try == 2 {
			return 0, 0, fmt.Errorf("rabbitmq: queue %s %w", queue, errCountTimedOut)
		}
	}
}

// consumingOn reports whether a consumer of this process has a basic.consume
// open on queue: the broker then counts at least that one consumer.
func (t *Transport) consumingOn(queue string) bool {
	for _, c := range t.consumersOf(func(k consumerKey) bool { return k.queue == queue }) {
		c.mu.Lock()
		on := c.in != nil && c.ch != nil && !c.ch.IsClosed() && !c.dead
		c.mu.Unlock()
		if on {
			return true
		}
	}
	return false
}

// inspect returns the ready messages and the consumers of a queue (AMQP
// queue.declare passive on a throw-away channel, since a missing queue
// closes the channel: exact, not sampled).
func (t *Transport) inspect(ctx context.Context, queue string) (ready int64, consumers int, err error) {
	ch, _, err := t.channel(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("rabbitmq: inspect queue %s: %w", queue, err)
	}
	return int64(q.Messages), q.Consumers, nil
}
