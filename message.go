package lily

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/lily-mq/lily/transport"
)

// Message is a message as published: event ID, key, type, original body
// and headers.
type Message = transport.Message

// Headers are message headers (AMQP table value types).
type Headers = transport.Headers

// Delivery is one hand-over of a message to a handler. The handler must
// not modify Body or Headers: they are the original bytes and headers that
// a retry or dead-letter copy carries on. Its SchemaVersion is read from
// the x-lily-schema-version header (0 when it has none or an unreadable
// one).
type Delivery struct {
	Message
	// Queue is the source queue.
	Queue string
	// DeliveryCount is the 1-based broker-side count of hand-overs of this
	// copy; above 1 the message was redelivered (a crash, a release).
	DeliveryCount int
	// RetryCount is the number of framework retries so far (x-retry-count).
	RetryCount int
	// RedriveCount is how many times an operator redrove the message.
	RedriveCount int
	// EnqueuedAt is when this copy entered the queue, if known.
	EnqueuedAt time.Time
	// ContentID reports that EventID was derived from the message's
	// content because its producer set no ID (RabbitMQ's synthetic ID):
	// byte-identical messages ("twins") share it, so it names their content
	// rather than one message. Package inbox reports twins it finds.
	ContentID bool

	raw *transport.Delivery
}

// Handler processes one delivery. It returns nil to acknowledge,
// Permanent(err) to dead-letter at once, and any other error to retry.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// NewEventID returns a new canonical event ID (a UUIDv7: time-ordered).
func NewEventID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// Publish publishes msgs to queue through t and returns once t confirmed
// them. A message without an EventID gets a new UUIDv7, written back into
// msgs. Transports carry the event ID, key and type in their native places
// (a column, the AMQP message_id, Lily's x-lily-* headers). A message with
// a SchemaVersion (>= 1) carries it as the x-lily-schema-version header
// (int32), set on a copy of its headers (the caller's map is not changed);
// a message whose headers already name a different version is refused, as
// is a version outside 1..evidence.MaxSchemaVersion. Published inside an
// OpenTelemetry span (ctx), a message without a traceparent gets the
// span's (InjectTraceContext): the consumer's spans become its children.
func Publish(ctx context.Context, t transport.Transport, queue string, msgs []Message) error {
	for i := range msgs {
		if msgs[i].EventID == "" {
			msgs[i].EventID = NewEventID()
		}
		msgs[i].Headers = InjectTraceContext(ctx, msgs[i].Headers)
		if err := stampSchemaVersion(&msgs[i]); err != nil {
			return fmt.Errorf("lily: publish to %s: message %d (%s): %w", queue, i, msgs[i].EventID, err)
		}
	}
	if err := t.Publish(ctx, &transport.PublishParams{Queue: queue, Messages: msgs}); err != nil {
		return fmt.Errorf("lily: publish to %s: %w", queue, err)
	}
	return nil
}
