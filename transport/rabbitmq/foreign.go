package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Kinds of foreign dead-letter queue: who fills the queue, and so where a
// message in it came from.
const (
	// ForeignMassTransit: MassTransit's <queue>_error (faults, MT-Fault-*
	// headers) and <queue>_skipped (messages no consumer took). The
	// origin is the queue named by MT-Fault-InputAddress
	// (rabbitmq://host[:port]/[vhost/]queue[?options]), else the DLQ's name
	// without its _error or _skipped suffix.
	ForeignMassTransit = "masstransit"
	// ForeignXDeath: a queue fed by a RabbitMQ dead-letter exchange. The
	// origin is x-first-death-queue, else the queue of the oldest x-death
	// entry.
	ForeignXDeath = "x-death"
	// ForeignNServiceBus: NServiceBus's error queue. The origin is
	// NServiceBus.FailedQ (its transport address; a "queue@machine" keeps
	// the queue).
	ForeignNServiceBus = "nservicebus"
)

// ForeignKinds lists the kinds of foreign dead-letter queue.
var ForeignKinds = []string{ForeignMassTransit, ForeignXDeath, ForeignNServiceBus}

// HeaderAMQPProperties is the header in which a foreign dead letter
// ingested into the catalog keeps the AMQP properties it came with
// (content_type, correlation_id, ...: MassTransit and NServiceBus read
// them), so that a redrive to its origin sends them again. It is Lily's,
// beside the original headers, and is not sent on redrive.
const HeaderAMQPProperties = "x-lily-amqp-properties"

// ForeignDLQ is a dead-letter queue another framework fills, drained and
// redriven by Lily: DrainDeadLetters and DeadLetterDepth take the physical
// queue's name, Publish sends each message back to its origin queue
// through the default exchange (never a shared exchange).
type ForeignDLQ struct {
	t    *Transport
	kind string
	to   string
}

var (
	_ transport.DeadLetterDrainer = (*ForeignDLQ)(nil)
	_ transport.DeadLetterCounter = (*ForeignDLQ)(nil)
)

// Foreign returns the foreign dead-letter queue handler of kind (one of
// ForeignKinds). A non-empty to sends every redriven message there instead
// of its origin.
func (t *Transport) Foreign(kind, to string) (*ForeignDLQ, error) {
	switch kind {
	case ForeignMassTransit, ForeignXDeath, ForeignNServiceBus:
	default:
		return nil, fmt.Errorf("rabbitmq: foreign dead-letter queue kind %q: want masstransit, x-death or nservicebus", kind)
	}
	return &ForeignDLQ{t: t, kind: kind, to: to}, nil
}

// DrainDeadLetters implements transport.DeadLetterDrainer for the physical
// queue p.Queue: each message keeps its body and headers, with its AMQP
// properties kept in HeaderAMQPProperties.
func (f *ForeignDLQ) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	return f.t.drain(ctx, p.Queue, p, func(d *amqp.Delivery) *transport.Delivery {
		dl := delivery(p.Queue, d)
		if props := properties(d); len(props) > 0 {
			if dl.Headers == nil {
				dl.Headers = transport.Headers{}
			}
			dl.Headers[HeaderAMQPProperties] = props
		}
		return dl
	}, store)
}

// DeadLetterDepth implements transport.DeadLetterCounter: the messages
// waiting in the foreign queue itself.
func (f *ForeignDLQ) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	return f.t.ready(ctx, queue)
}

// properties are the AMQP properties of d that a redrive sends again.
func properties(d *amqp.Delivery) map[string]any {
	props := map[string]any{}
	for k, v := range map[string]string{
		"content_type": d.ContentType, "content_encoding": d.ContentEncoding, "correlation_id": d.CorrelationId,
		"reply_to": d.ReplyTo, "type": d.Type, "app_id": d.AppId, "user_id": d.UserId,
	} {
		if v != "" {
			props[k] = v
		}
	}
	if d.Priority != 0 {
		props["priority"] = int32(d.Priority)
	}
	return props
}

// Publish implements redrive.Publisher: each message goes to its origin
// (or to the ForeignDLQ's to), published on the default exchange with the
// routing key of that queue, mandatory and confirmed; p.Queue, the foreign
// DLQ, only names the messages in errors.
func (f *ForeignDLQ) Publish(ctx context.Context, p *transport.PublishParams) error {
	msgs := make([]outMsg, len(p.Messages))
	for i, m := range p.Messages {
		dest := f.to
		if dest == "" {
			var err error
			if dest, err = ForeignOrigin(f.kind, p.Queue, m.Headers); err != nil {
				return fmt.Errorf("rabbitmq: redrive %s from %s: %w", m.EventID, p.Queue, err)
			}
		}
		h := transport.CloneHeaders(m.Headers)
		props := asMap(h[HeaderAMQPProperties])
		delete(h, HeaderAMQPProperties)
		m.Headers = h
		pub, err := publishing(m, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: redrive %s to %s: %w", m.EventID, dest, err)
		}
		str := func(k string) string { s, _ := props[k].(string); return s }
		pub.ContentType, pub.ContentEncoding, pub.CorrelationId = str("content_type"), str("content_encoding"), str("correlation_id")
		pub.ReplyTo, pub.AppId, pub.UserId = str("reply_to"), str("app_id"), str("user_id")
		if s := str("type"); s != "" {
			pub.Type = s
		}
		if n, ok := evidence.Int(props["priority"]); ok && n > 0 && n < 256 {
			pub.Priority = uint8(n)
		}
		msgs[i] = outMsg{exchange: "", key: dest, pub: pub}
	}
	if err := errors.Join(f.t.publish(ctx, msgs)...); err != nil {
		return fmt.Errorf("rabbitmq: redrive from %s to the origin queues: %w", p.Queue, err)
	}
	return nil
}

// ForeignOrigin returns the queue a message of a foreign dead-letter queue
// dlq of kind came from, read from its headers (see the Foreign* kinds).
// The error says which header was missing and that --to names a queue.
func ForeignOrigin(kind, dlq string, h transport.Headers) (string, error) {
	text := func(name string) string {
		switch v := h[name].(type) {
		case string:
			return strings.TrimSpace(v)
		case []byte:
			return strings.TrimSpace(string(v))
		}
		return ""
	}
	switch kind {
	case ForeignMassTransit:
		if a := text("MT-Fault-InputAddress"); a != "" {
			q, err := massTransitQueue(a)
			if err != nil {
				return "", fmt.Errorf("MT-Fault-InputAddress %q: %w", a, err)
			}
			return q, nil
		}
		for _, suffix := range []string{"_error", "_skipped"} {
			if q, ok := strings.CutSuffix(dlq, suffix); ok && q != "" {
				return q, nil
			}
		}
		return "", fmt.Errorf("no MT-Fault-InputAddress header and the queue name %q does not end in _error or _skipped: pass --to QUEUE", dlq)
	case ForeignXDeath:
		if q := text("x-first-death-queue"); q != "" {
			return q, nil
		}
		if list, ok := h["x-death"].([]any); ok && len(list) > 0 {
			entry := asMap(list[len(list)-1]) // newest first: the oldest is last
			if q, ok := entry["queue"].(string); ok && q != "" {
				return q, nil
			}
		}
		return "", errors.New("no x-first-death-queue header and no x-death entry naming a queue: pass --to QUEUE")
	case ForeignNServiceBus:
		if q := text("NServiceBus.FailedQ"); q != "" {
			q, _, _ = strings.Cut(q, "@") // MSMQ-style queue@machine
			return q, nil
		}
		return "", errors.New("no NServiceBus.FailedQ header: pass --to QUEUE")
	}
	return "", fmt.Errorf("foreign dead-letter queue kind %q: want masstransit, x-death or nservicebus", kind)
}

// massTransitQueue reads the queue of a MassTransit RabbitMQ address,
// rabbitmq://host[:port]/[vhost/]queue[?options] (rabbitmqs:// too): the
// last path segment, unescaped.
func massTransitQueue(addr string) (string, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return "", err
	}
	if u.Scheme != "rabbitmq" && u.Scheme != "rabbitmqs" && u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", fmt.Errorf("scheme %q: want rabbitmq://host/vhost/queue", u.Scheme)
	}
	path := strings.Trim(u.EscapedPath(), "/")
	if path == "" {
		return "", errors.New("no queue in the path: want rabbitmq://host/vhost/queue")
	}
	seg := path[strings.LastIndex(path, "/")+1:]
	q, err := url.PathUnescape(seg)
	if err != nil || q == "" {
		return "", fmt.Errorf("queue %q: %v", seg, err)
	}
	return q, nil
}

// asMap returns a header table as a map, whatever its Go type (an AMQP
// table, headers decoded from the catalog); nil if v is no table.
func asMap(v any) map[string]any {
	switch t := v.(type) {
	case map[string]any:
		return t
	case amqp.Table:
		return t
	}
	return nil
}
