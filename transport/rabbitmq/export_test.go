package rabbitmq

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
