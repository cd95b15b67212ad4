package cli

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// ingestForeign drains the [[foreign_dlq]] queues of c (only the one named
// only, when not empty) into cat: catalog commit, then broker ack; the
// entries keep the foreign evidence, and the ledger counts them accepted.
// It returns the queues it drained, in config order.
func ingestForeign(ctx context.Context, brk *brokers.Set, cat *catalog.Store, c config.Config, only string, out *ingestJSON) ([]string, error) {
	var names []string
	for _, f := range c.ForeignDLQs {
		if only != "" && f.Queue != only {
			continue
		}
		fd, err := foreignDrainer(ctx, brk, f)
		if err != nil {
			return names, err
		}
		n, err := cat.IngestWith(ctx, fd, catalog.IngestParams{Queue: f.Queue, Foreign: f.Kind, Reason: f.Reason()})
		out.Queues[f.Queue] = n
		out.Total += n
		names = append(names, f.Queue)
		if err != nil {
			return names, fmt.Errorf("ingest the %s queue %s (after %d dead letters): %w", f.Kind, f.Queue, n, err)
		}
	}
	return names, nil
}

// foreignDrainer returns the drainer of a [[foreign_dlq]] entry: the
// RabbitMQ queue of its kind, a JetStream consumer's advisories (its
// advisory stream declared first: advisories are kept from then on), an
// Azure Functions trigger queue's "<queue>-poison", or a Lambda function's
// on-failure destination (an SQS queue).
func foreignDrainer(ctx context.Context, brk *brokers.Set, f config.ForeignDLQConfig) (transport.DeadLetterDrainer, error) {
	if f.Kind == config.ForeignLambdaDestination {
		t, err := brk.SQS(ctx)
		if err != nil {
			return nil, err
		}
		return t.LambdaDestination(f.Queue), nil
	}
	if f.Kind == config.ForeignAzureFunctions {
		az, err := brk.AzQueue(ctx)
		if err != nil {
			return nil, err
		}
		return az.Functions(f.Queue, f.MaxDequeueCountOrDefault(), ""), nil
	}
	if f.Kind == config.ForeignJetStream {
		nt, err := brk.NATS(ctx)
		if err != nil {
			return nil, err
		}
		fc := nt.Foreign(f.Stream, f.Consumer, f.RedriveSubject)
		if err := fc.Declare(ctx); err != nil {
			return nil, err
		}
		return fc, nil
	}
	rmq, err := brk.RabbitMQ(ctx)
	if err != nil {
		return nil, err
	}
	return rmq.Foreign(f.Kind, "")
}

// foreignTarget returns the publisher that redrives the entries of a
// [[foreign_dlq]] queue: each message to its origin queue (or to --to),
// on the default exchange; ok is false for any other queue.
func (r *redriveTargets) foreignTarget(ctx context.Context, queue string) (pub redrive.Publisher, ok bool, err error) {
	if !r.env.hasCfg {
		return nil, false, nil
	}
	f, ok := r.env.cfg.ForeignDLQ(queue)
	if !ok {
		return nil, false, nil
	}
	brk, err := r.open()
	if err != nil {
		return nil, true, err
	}
	if f.Kind == config.ForeignLambdaDestination {
		// The event goes back by invoking the function, which Lily does
		// not do; --to an SQS queue (one the function's event source
		// reads) takes it.
		if r.to == "" {
			return nil, true, usagef("--queue %s: a Lambda on-failure destination's events go back by invoking the function, which Lily does not do: redrive them with --to QUEUE, an SQS queue that feeds the function (or discard them once handled)", queue)
		}
		t, err := brk.SQS(ctx)
		if err != nil {
			return nil, true, err
		}
		return redirectTo{t: t, queue: r.to}, true, nil
	}
	if f.Kind == config.ForeignAzureFunctions {
		// The text alone, to the function's trigger queue (or --to).
		az, err := brk.AzQueue(ctx)
		if err != nil {
			return nil, true, err
		}
		return az.Functions(f.Queue, f.MaxDequeueCountOrDefault(), r.to), true, nil
	}
	if f.Kind == config.ForeignJetStream {
		// To the consumer alone: --to (or redrive_subject) must be a
		// subject only it reads; Publish checks it on the stream.
		nt, err := brk.NATS(ctx)
		if err != nil {
			return nil, true, err
		}
		subject := f.RedriveSubject
		if r.to != "" {
			subject = r.to
		}
		return nt.Foreign(f.Stream, f.Consumer, subject), true, nil
	}
	rmq, err := brk.RabbitMQ(ctx)
	if err != nil {
		return nil, true, err
	}
	if r.to != "" {
		if _, err := rmq.InFlight(ctx, r.to); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				return nil, true, fmt.Errorf("--to %s: no such queue on the broker: %w", r.to, transport.ErrUnknownQueue)
			}
			return nil, true, fmt.Errorf("--to %s: check the queue on the broker: %w", r.to, err)
		}
	}
	fd, err := rmq.Foreign(f.Kind, r.to)
	return fd, true, err
}

// redirectTo publishes a redrive to one queue of a transport, whatever the
// message's origin (a Lambda destination's events go to --to).
type redirectTo struct {
	t     transport.Transport
	queue string
}

// Publish publishes p's messages to the redirect's queue, as new messages
// there (Redrive kept: they were accepted once already).
func (r redirectTo) Publish(ctx context.Context, p *transport.PublishParams) error {
	q := *p
	q.Queue = r.queue
	return r.t.Publish(ctx, &q)
}
