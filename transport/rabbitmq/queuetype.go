package rabbitmq

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/lily-mq/lily/transport"
)

// Lily consumes only quorum queues. A classic queue never sets
// x-delivery-count (checked on RabbitMQ 3.10.8: absent on all of 8
// redeliveries, crash-type ones included; only the redelivered flag is
// set) and has no delivery limit, so a message that kills its consumer is
// never counted and is redelivered forever. Lily keeps no persistent count
// of its own there (as it does on Kafka, keyed by topic/partition/offset:
// a RabbitMQ message has no such coordinates, and a store written before
// every handler would cost every delivery); instead the consumer refuses
// such a queue:
// Receive returns transport.ErrUnsafeQueue, naming the queue, its type and
// the fix, and the runtime stops. `lily lint --live` reports the same
// queue (queue-not-quorum).
//
// The type is read from the management API (AMQP has no way to ask: a
// passive declare ignores arguments, and a full declare would create a
// missing queue or close the channel on any other argument that
// differs), once per queue and transport. When the API cannot be reached
// the check is skipped with a warning: consuming goes on, unchecked.

// queueTypeTimeout bounds one read of the management API.
const queueTypeTimeout = 5 * time.Second

// checkQueueType returns transport.ErrUnsafeQueue when queue is not a
// quorum queue, nil when it is, when it does not exist (the consume then
// fails by itself) or when its type cannot be read.
func (t *Transport) checkQueueType(ctx context.Context, queue string) error {
	t.mu.Lock()
	done := t.typeChecked[queue]
	t.mu.Unlock()
	if done {
		return nil
	}
	m := t.opts.Management
	if m == nil {
		var err error
		if m, err = ManagementFor(t.opts.URL); err != nil {
			return err
		}
		m.Client = t.mgmtHTTP
	}
	var got struct {
		Type      string         `json:"type"`
		Arguments map[string]any `json:"arguments"`
	}
	rctx, cancel := context.WithTimeout(ctx, queueTypeTimeout)
	defer cancel()
	found, err := m.Get(rctx, "/api/queues/"+m.VHostPath()+"/"+url.PathEscape(queue), &got)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		t.opts.Logger.Warn("rabbitmq: cannot read the queue's type from the management API; consuming without the check "+
			"(a classic queue counts no deliveries: a crash-type poison message would loop forever)",
			"queue", queue, "err", err)
	case !found:
		return nil // not marked: checked again once it exists
	default:
		typ := got.Type
		if typ == "" {
			typ, _ = got.Arguments["x-queue-type"].(string)
		}
		if typ == "" {
			typ = "classic"
		}
		if typ != "quorum" {
			return fmt.Errorf("rabbitmq: queue %q is a %s queue, not a quorum queue: RabbitMQ counts no deliveries there "+
				"(no x-delivery-count, no delivery limit), so a message that kills its consumer would be redelivered forever; "+
				"move its messages out, delete it and declare it as quorum with 'lily topology apply' "+
				"('lily lint --live' reports it as queue-not-quorum): %w", queue, typ, transport.ErrUnsafeQueue)
		}
	}
	t.mu.Lock()
	t.typeChecked[queue] = true
	t.mu.Unlock()
	return nil
}
