package transport

import (
	"context"
	"time"
)

// QueueSpec describes one logical queue for Declarer: the queue itself, its
// retry buckets and its dead-letter destination.
type QueueSpec struct {
	// Name of the queue, e.g. "orders.created".
	Name string
	// Exchange the queue belongs to (RabbitMQ); empty elsewhere.
	Exchange string
	// BindingKeys route the exchange's messages to the queue (RabbitMQ).
	BindingKeys []string
	// DeliveryLimit is the most deliveries of one copy (docs/design.md §5).
	DeliveryLimit int
	// BucketsMillis are the distinct retry delays, ascending.
	BucketsMillis []int64
	// BucketMaxLength and DLQMaxLength cap the retry buckets and the
	// dead-letter queue where the broker supports it; 0 means no cap.
	BucketMaxLength int64
	DLQMaxLength    int64
	// SingleActiveConsumer lets one consumer at a time consume the queue
	// (RabbitMQ's x-single-active-consumer): per-key order (ordering park
	// or block) needs it.
	SingleActiveConsumer bool
	// ShareGroup, on a Kafka queue, is the share group (KIP-932) its
	// consumers join instead of a consumer group; "" for a consumer group.
	ShareGroup string
}

// DeclareParams are the arguments of Declarer.Declare.
type DeclareParams struct {
	Queues []QueueSpec
}

// Declarer is implemented by transports that create their topology from the
// configuration. Declare is idempotent.
type Declarer interface {
	Declare(ctx context.Context, p *DeclareParams) error
}

// RecoverParams are the arguments of LeaseRecoverer.RecoverLeases.
type RecoverParams struct {
	// Consumer is the instance whose leases are given back.
	Consumer string
}

// LeaseRecoverer is implemented by lease-based transports. A supervisor that
// knows a consumer instance died calls RecoverLeases so that its deliveries
// become visible at once instead of after their visibility timeout — as a
// broker requeues a closed channel's unacknowledged messages. The delivery
// counts stay raised. It returns how many deliveries were recovered.
type LeaseRecoverer interface {
	RecoverLeases(ctx context.Context, p *RecoverParams) (int, error)
}

// InFlightCounter is implemented by transports that can count the messages
// of a queue that are neither acknowledged nor dead-lettered (ready, leased
// or waiting in a retry bucket). The ledger uses it for reconciliation.
type InFlightCounter interface {
	InFlight(ctx context.Context, queue string) (int64, error)
}

// Features describes what a transport does by itself.
type Features struct {
	// BrokerDeliveryLimit: the broker dead-letters at the delivery limit.
	BrokerDeliveryLimit bool
	// DelayedRetry: the transport holds retries for a delay (buckets).
	DelayedRetry bool
	// Leases: deliveries are leased with a visibility timeout.
	Leases bool
	// VisibilityTimeout is the lease length, when Leases.
	VisibilityTimeout time.Duration
	// CatalogParking: a DeadLetter settlement with reason "parked" is in
	// the catalog, as a parked entry, when Settle returns (no broker
	// dead-letter queue to ingest first). Ordering "park" and "block"
	// need it.
	CatalogParking bool
	// UnreceiveInPlace: Unreceiver puts a delivery back where it was in
	// its queue (SQLite: its row becomes visible again). Without it a
	// given-back delivery goes to the tail (a broker republish), so a
	// consumer of an ordered queue processes what it received instead.
	UnreceiveInPlace bool
}

// Featurer is implemented by transports that describe their Features.
type Featurer interface {
	Features() Features
}

// QueueFeaturer is implemented by transports whose features differ per
// queue (Kafka: a share-group queue's deliveries are leased, a consumer
// group's are not). The runtime prefers it to Featurer.
type QueueFeaturer interface {
	QueueFeatures(queue string) Features
}

// FeaturesOf returns t's features for queue: QueueFeaturer's, else
// Featurer's, else none.
func FeaturesOf(t Transport, queue string) Features {
	if qf, ok := t.(QueueFeaturer); ok {
		return qf.QueueFeatures(queue)
	}
	if f, ok := t.(Featurer); ok {
		return f.Features()
	}
	return Features{}
}

// StopParams are the arguments of ConsumerStopper.StopConsumer.
type StopParams struct {
	Queue    string
	Consumer string
	// Ordered is set when the queue keeps per-key order (ordering block
	// or park): what a wrapper still holds must not be given back where
	// the transport would not put it back in place
	// (Features.UnreceiveInPlace), since that moves it behind later
	// messages of its key.
	Ordered bool
}

// ConsumerStopper is implemented by transports that hold per-consumer
// state, such as a broker pushing a prefetch window. The runtime calls
// StopConsumer when a consumer instance stops after settling everything it
// received: the transport ends the consumption and gives back what it
// received but never handed out.
type ConsumerStopper interface {
	StopConsumer(ctx context.Context, p *StopParams) error
}

// DrainParams are the arguments of DeadLetterDrainer.DrainDeadLetters.
type DrainParams struct {
	// Queue is the source queue whose dead-letter destination is drained.
	Queue string
	// Batch is the most dead letters handed to the callback at once.
	// Defaults to 256.
	Batch int
	// Limit stops after this many dead letters; 0 drains all.
	Limit int
}

// DeadLetterDrainer is implemented by transports whose dead letters live in
// the broker (a DLQ, a dead-letter topic). DrainDeadLetters hands them to
// store in batches and removes a batch from the broker only after store
// returned nil for it (catalog commit, then broker ack). It returns how
// many were drained.
type DeadLetterDrainer interface {
	DrainDeadLetters(ctx context.Context, p *DrainParams, store func(context.Context, []*Delivery) error) (int, error)
}

// DeadLetterCounter is implemented by transports whose dead letters wait in
// the broker until drained: DeadLetterDepth counts those not drained yet,
// which the ledger adds to the dead-lettered ones.
type DeadLetterCounter interface {
	DeadLetterDepth(ctx context.Context, queue string) (int64, error)
}

// ConcurrentSettler is implemented by transports whose Settle calls make
// progress in parallel (e.g. RabbitMQ: each call publishes its hand-offs on
// its own confirm-mode channel and waits for its own confirms). The runtime
// keeps up to SettleConcurrency batches in flight instead of one, so that
// the next batch is published while the previous one waits for its
// confirms. Transports that do not implement it are given one batch at a
// time (a SQLite commit gains nothing from a second one waiting).
type ConcurrentSettler interface {
	SettleConcurrency() int
}

// ExtendParams are the arguments of LeaseExtender.ExtendLeases.
type ExtendParams struct {
	// Consumer is the instance that holds the leases.
	Consumer string
	// Deliveries are the deliveries whose leases are extended; each must
	// still be held by Consumer.
	Deliveries []*Delivery
	// For is the new lease length, counted from now.
	For time.Duration
}

// LeaseExtender is implemented by lease-based transports (Features.Leases)
// whose leases can be extended while their deliveries are still in flight,
// like JetStream's InProgress or SQS's ChangeMessageVisibility. The runtime
// extends the lease of every delivery it holds well before it runs out, so
// that a slow handler or a delivery waiting for a free worker is not handed
// out a second time. ExtendLeases returns nil when every lease was
// extended; otherwise a *SettleError aligned with p.Deliveries whose
// elements wrap ErrLeaseLost for deliveries no longer held (their lease had
// run out and another consumer has them), or another error when nothing
// was extended.
type LeaseExtender interface {
	ExtendLeases(ctx context.Context, p *ExtendParams) error
}

// UnreceiveParams are the arguments of Unreceiver.Unreceive.
type UnreceiveParams struct {
	// Consumer is the instance that received the deliveries.
	Consumer string
	// Deliveries were received and never handed to a handler.
	Deliveries []*Delivery
}

// Unreceiver is implemented by transports that can give a received delivery
// back as if it had never been received: visible again at once, its
// delivery count what it was before (no handler saw it, so it is not a
// delivery). The runtime gives back what it leased but did not start when
// it stops, so that a graceful stop neither waits for a whole leased batch
// nor raises counts. The result is reported as for LeaseExtender.
type Unreceiver interface {
	Unreceive(ctx context.Context, p *UnreceiveParams) error
}

// ConsumeCanceller is implemented by transports where the broker pushes
// deliveries (a prefetch window). CancelConsume ends the consumer
// instance's subscription (AMQP basic.cancel) without closing its channel:
// nothing new is pushed, what was pushed stays settleable, and Receive
// hands it out — without waiting, never subscribing again — until none is
// left. A graceful stop cancels, processes and settles what was delivered,
// and only then calls ConsumerStopper.StopConsumer: closing a channel with
// deliveries on it would return them with their delivery counts raised.
type ConsumeCanceller interface {
	CancelConsume(ctx context.Context, p *StopParams) error
}
