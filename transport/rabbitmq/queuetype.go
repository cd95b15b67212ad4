package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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
// The type is read through AMQP itself, so that the refusal never depends
// on the optional management plugin (a fresh broker has it off): on a
// throwaway channel, a passive declare says whether the queue exists (a
// missing one is not checked: the consume fails by itself), then a full
// declare of the existing queue with x-queue-type = quorum and the other
// arguments it has is a no-op on a quorum queue and is refused with
// PRECONDITION_FAILED ("inequivalent arg 'x-queue-type' … current is
// none") on any other type. The broker compares every argument and names
// the first that differs, so the declare starts from the arguments Lily
// declares for the queue and takes, for any other argument named, the
// queue's current value from the refusal, until the broker either
// accepts (quorum) or names x-queue-type, durable, auto_delete or
// exclusivity (not quorum: a quorum queue is always durable, never
// auto-deleted or exclusive). Only when the refusal cannot be followed
// (an argument whose value it cannot repeat, such as a table) is the
// management API asked; if that cannot be reached either, the check is
// skipped with a warning.

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
	typ, found, err := t.amqpQueueType(ctx, queue)
	if err != nil && ctx.Err() == nil {
		mtyp, mfound, merr := t.managementQueueType(ctx, queue)
		if merr != nil {
			t.opts.Logger.Warn("rabbitmq: cannot tell the queue's type, through AMQP or the management API; consuming without the check "+
				"(a classic queue counts no deliveries: a crash-type poison message would loop forever)",
				"queue", queue, "amqp_err", err, "management_err", merr)
			typ, found, err = "quorum", true, nil
		} else {
			typ, found, err = mtyp, mfound, nil
		}
	}
	switch {
	case err != nil:
		return err // ctx ended
	case !found:
		return nil // not marked: checked again once it exists
	case typ != "quorum":
		return fmt.Errorf("rabbitmq: queue %q is a %s queue, not a quorum queue: RabbitMQ counts no deliveries there "+
			"(no x-delivery-count, no delivery limit), so a message that kills its consumer would be redelivered forever; "+
			"move its messages out, delete it and declare it as quorum with 'lily topology apply' "+
			"('lily lint --live' reports it as queue-not-quorum): %w", queue, typ, transport.ErrUnsafeQueue)
	}
	t.mu.Lock()
	t.typeChecked[queue] = true
	t.mu.Unlock()
	return nil
}

// inequivalent parses the broker's refusal of a declare whose arguments
// differ from the queue's: the argument, what was received, what is
// current ("none" or "the value 'V' of type 'T'"; for durable and
// auto_delete a bare 'true'/'false').
var inequivalent = regexp.MustCompile(`inequivalent arg '([^']+)' for queue .*: received (.*) but current is (.*)$`)

// argValue parses "the value 'V' of type 'T'".
var argValue = regexp.MustCompile(`^the value '(.*)' of type '([a-z]+)'$`)

// bareValue parses "'V'": a current value whose type is the one received.
var bareValue = regexp.MustCompile(`^'(.*)'$`)

// typeOf is the refusal's type name of a value Lily sends.
func typeOf(v any) string {
	switch v.(type) {
	case string:
		return "longstr"
	case int, int8, int16, int32, int64:
		return "long"
	case bool:
		return "bool"
	case float32, float64:
		return "double"
	}
	return ""
}

// maxTypeProbes bounds the declares of one type check: one per argument
// the broker can name, and a few more.
const maxTypeProbes = 24

// QueueType reads a queue's type through AMQP alone (see above), as the
// consumer's check does, for callers that judge a broker without the
// management plugin ('lily lint --live'): "quorum", or the other type as
// far as the broker's refusal tells it ("classic" when it names none);
// found is false when the queue does not exist. An error means the type
// could not be told (a refusal that cannot be followed, such as a
// table-valued argument). A queue Register'ed with its spec is declared
// with its planned arguments first, so that a quorum queue is accepted at
// once. The declare is passive until the queue is known to exist, and a
// full declare equal to the queue is a no-op (only a queue deleted between
// the two would be created again, as quorum).
func (t *Transport) QueueType(ctx context.Context, queue string) (typ string, found bool, err error) {
	return t.amqpQueueType(ctx, queue)
}

// amqpQueueType reads a queue's type through AMQP (see above): "quorum",
// or the other type as far as the refusal tells it ("classic" when it
// names none), found false when the queue does not exist. An error means
// the type could not be told.
func (t *Transport) amqpQueueType(ctx context.Context, queue string) (typ string, found bool, err error) {
	probe := func(f func(ch *amqp.Channel) error) error {
		ch, _, err := t.channel(ctx)
		if err != nil {
			return err
		}
		defer ch.Close() // a refused declare has closed it already: harmless
		return f(ch)
	}
	err = probe(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return "", false, nil
	case errors.As(err, &ae) && ae.Code == amqp.ResourceLocked:
		return "exclusive (classic)", true, nil // another connection's exclusive queue: never quorum
	case err != nil:
		return "", false, fmt.Errorf("rabbitmq: inspect queue %s: %w", queue, err)
	}
	args := amqp.Table{}
	if s, err := t.spec(queue); err == nil {
		if top, err := Plan([]transport.QueueSpec{s}); err == nil {
			for _, q := range top.Queues {
				if q.Name == queue {
					for k, v := range q.Arguments {
						args[k] = v
					}
				}
			}
		}
	}
	args["x-queue-type"] = "quorum"
	for range maxTypeProbes {
		err := probe(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(queue, true, false, false, false, args)
			return err
		})
		if err == nil {
			return "quorum", true, nil
		}
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			if errors.As(err, &ae) && ae.Code == amqp.ResourceLocked {
				return "exclusive (classic)", true, nil
			}
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				return "", false, nil
			}
			return "", false, fmt.Errorf("rabbitmq: declare queue %s to read its type: %w", queue, err)
		}
		m := inequivalent.FindStringSubmatch(ae.Reason)
		if m == nil {
			return "", false, fmt.Errorf("rabbitmq: declare queue %s to read its type: refusal not understood: %w", queue, err)
		}
		name, current := m[1], m[3]
		switch name {
		case "x-queue-type":
			if v := argValue.FindStringSubmatch(current); v != nil {
				return v[1], true, nil
			}
			return "classic", true, nil
		case "durable", "auto_delete", "exclusive":
			return "classic (" + name + " " + current + ")", true, nil
		}
		if current == "none" {
			delete(args, name)
			continue
		}
		var val any
		ok := false
		if v := argValue.FindStringSubmatch(current); v != nil {
			val, ok = tableValue(v[1], v[2])
		} else if v := bareValue.FindStringSubmatch(current); v != nil {
			// Both sides set, of one type class: the value differs; it is
			// repeated with the type of the value sent.
			val, ok = tableValue(v[1], typeOf(args[name]))
		}
		if !ok {
			return "", false, fmt.Errorf("rabbitmq: declare queue %s to read its type: argument %s: its current value %s cannot be repeated", queue, name, current)
		}
		args[name] = val
	}
	return "", false, fmt.Errorf("rabbitmq: declare queue %s to read its type: still refused after %d declares", queue, maxTypeProbes)
}

// tableValue is the AMQP table value of a refusal's "the value 'V' of
// type 'T'", when it can be repeated.
func tableValue(v, typ string) (any, bool) {
	switch typ {
	case "longstr", "shortstr":
		return v, true
	case "long", "signedint", "short", "byte", "unsignedbyte", "unsignedshort", "unsignedint":
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	case "bool":
		b, err := strconv.ParseBool(v)
		return b, err == nil
	case "double", "float":
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return nil, false
}

// managementQueueType reads a queue's type from the management API: the
// fallback when AMQP's refusal cannot be followed.
func (t *Transport) managementQueueType(ctx context.Context, queue string) (typ string, found bool, err error) {
	m := t.opts.Management
	if m == nil {
		if m, err = ManagementFor(t.opts.URL); err != nil {
			return "", false, err
		}
		m.Client = t.mgmtHTTP
	}
	var got struct {
		Type      string         `json:"type"`
		Arguments map[string]any `json:"arguments"`
	}
	rctx, cancel := context.WithTimeout(ctx, queueTypeTimeout)
	defer cancel()
	found, err = m.Get(rctx, "/api/queues/"+m.VHostPath()+"/"+url.PathEscape(queue), &got)
	if err != nil || !found {
		return "", found, err
	}
	typ = got.Type
	if typ == "" {
		typ, _ = got.Arguments["x-queue-type"].(string)
	}
	if typ == "" {
		typ = "classic"
	}
	return typ, true, nil
}
