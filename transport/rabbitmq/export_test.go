package rabbitmq

import "context"

// HeaderFrameSize exports headerFrameSize to the tests.
var HeaderFrameSize = headerFrameSize

// DropDelivery takes one message of queue with a basic.get on the channel
// of consumer instance and throws it away unread, as the client library
// drops a delivery that arrives for a consumer tag it has cancelled: the
// broker holds it unacknowledged on that channel, and the consumer never
// saw it. It reports whether the queue had a message.
func (t *Transport) DropDelivery(queue, instance string) (bool, error) {
	c := t.consumer(queue, instance, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok, err := c.ch.Get(queue, false)
	return ok, err
}

// AnswerCounts makes the queue counts of InFlightParts come from answer
// (given the broker's real answer) until the returned restore is called.
// A test that calls it must not run in parallel.
func AnswerCounts(answer func(queue string, ready int64, consumers int, err error) (int64, int, error)) (restore func()) {
	real := inspectFn
	inspectFn = func(t *Transport, ctx context.Context, queue string) (int64, int, error) {
		ready, n, err := real(t, ctx, queue)
		return answer(queue, ready, n, err)
	}
	return func() { inspectFn = real }
}

// ErrCountTimedOut exports errCountTimedOut to the tests.
var ErrCountTimedOut = errCountTimedOut
