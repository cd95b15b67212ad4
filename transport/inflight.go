package transport

import "context"

// InFlightParts splits a queue's in-flight count (InFlightCounter) by who
// holds the messages, so that reconcile can show that nothing is lost
// while consumers in other processes hold deliveries (docs/design.md §9).
type InFlightParts struct {
	// Ready: waiting in the queue for a consumer. On a log (Kafka), the
	// records past the group's committed offsets — fetched by a consumer
	// or not, a log does not tell them apart.
	Ready int64
	// Retrying: waiting in the queue's retry buckets (RabbitMQ) or retry
	// topics (Kafka, past the committed offsets).
	Retrying int64
	// Unacked: delivered to a consumer — of any process — and not
	// acknowledged yet (RabbitMQ messages_unacknowledged).
	Unacked int64
	// DeadLettering: dead-lettered by the broker and not in the
	// dead-letter queue yet (RabbitMQ quorum queues' at-least-once
	// dead-letter process, messages_dlx).
	DeadLettering int64
	// Other: in flight, not broken down by the transport.
	Other int64
	// Unknown, when set, says why the deliveries held by consumers of
	// other processes could not be counted (RabbitMQ without its
	// management API): Unacked then counts this process's only, and a
	// shortfall of the ledger is unknown, not lost.
	Unknown string
}

// Total is the in-flight count.
func (p InFlightParts) Total() int64 {
	return p.Ready + p.Retrying + p.Unacked + p.DeadLettering + p.Other
}

// InFlightBreakdown is implemented by transports that can say who holds a
// queue's in-flight messages. InFlightParts(...).Total() equals InFlight.
type InFlightBreakdown interface {
	InFlightParts(ctx context.Context, queue string) (InFlightParts, error)
}
