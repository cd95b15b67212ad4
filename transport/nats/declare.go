package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport"
)

// retrySubjects are the subjects of the retry stream.
const retrySubjects = "lily.retries.>"

// Declare creates, for each queue, its stream (the queue's name as
// subject, Options.Retention), its durable pull consumer (explicit acks,
// AckWait, no MaxDeliver: Lily bounds deliveries itself) and its
// dead-letter stream (limits retention, so that operators can read it;
// dlq_max_length caps it and refuses what is over it), plus the retry
// stream that every queue shares. A queue of Options.Queues is adopted:
// its stream and consumer must exist, and are checked instead. Declare is
// idempotent.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if err := t.declareRetryStream(ctx); err != nil {
		return err
	}
	for _, q := range p.Queues {
		if err := CheckQueueName(q.Name); err != nil {
			return err
		}
		b := t.QueueBinding(q.Name)
		if _, adopted := t.opts.Queues[q.Name]; adopted {
			if err := t.checkAdopted(ctx, q, b); err != nil {
				return err
			}
		} else if err := t.declareQueue(ctx, q, b); err != nil {
			return err
		}
		if err := t.declareDeadLetters(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (t *Transport) declareQueue(ctx context.Context, q transport.QueueSpec, b Binding) error {
	retention := jetstream.WorkQueuePolicy
	if t.opts.Retention == RetentionLimits {
		retention = jetstream.LimitsPolicy
	}
	_, err := t.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: b.Stream, Subjects: []string{b.Subject},
		Retention: retention, Storage: jetstream.FileStorage, Replicas: t.opts.Replicas, AllowDirect: true})
	if err != nil {
		return fmt.Errorf("nats: declare stream %s of queue %s (subject %s, retention %s): %w", b.Stream, q.Name, b.Subject, t.opts.Retention, err)
	}
	_, err = t.js.CreateOrUpdateConsumer(ctx, b.Stream, jetstream.ConsumerConfig{Durable: b.Consumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: t.opts.AckWait, MaxDeliver: -1, MaxAckPending: t.maxAckPending(q),
		DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("nats: declare consumer %s on stream %s of queue %s: %w", b.Consumer, b.Stream, q.Name, err)
	}
	return nil
}

// maxAckPending is the MaxAckPending of q's consumer: 1 for a queue that
// keeps per-key order (ordering park or block, QueueSpec.SingleActiveConsumer),
// else Options.MaxAckPending. With 1 the server hands the consumer's next
// message out only once the previous one is settled, whichever process
// holds it: the stream is consumed in order across every instance, and a
// message whose holder died comes back (after AckWait) before anything
// behind it — what RabbitMQ's single active consumer with prefetch 1 gives
// (docs/design.md §4.9, §8.8).
func (t *Transport) maxAckPending(q transport.QueueSpec) int {
	if q.SingleActiveConsumer {
		return 1
	}
	return t.opts.MaxAckPending
}

// checkAdopted checks an existing stream and consumer: the consumer must
// be a pull consumer with explicit acks (Lily settles each message), and
// for an ordered queue hand out one message at a time (MaxAckPending 1).
func (t *Transport) checkAdopted(ctx context.Context, q transport.QueueSpec, b Binding) error {
	queue := q.Name
	c, err := t.js.Consumer(ctx, b.Stream, b.Consumer)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("nats: queue %s adopts consumer %s of stream %s: %w: create them, or leave the queue out of the nats queues to let Lily declare its own",
				queue, b.Consumer, b.Stream, transport.ErrUnknownQueue)
		}
		return fmt.Errorf("nats: queue %s: consumer %s of stream %s: %w", queue, b.Consumer, b.Stream, err)
	}
	cfg := c.CachedInfo().Config
	if cfg.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("nats: queue %s: consumer %s of stream %s has ack policy %s: %w: Lily acknowledges each message, so it needs AckExplicit",
			queue, b.Consumer, b.Stream, cfg.AckPolicy, transport.ErrUnsafeQueue)
	}
	if cfg.DeliverSubject != "" {
		return fmt.Errorf("nats: queue %s: consumer %s of stream %s is a push consumer (deliver subject %s): %w: Lily pulls; create a pull consumer",
			queue, b.Consumer, b.Stream, cfg.DeliverSubject, transport.ErrUnsafeQueue)
	}
	if q.SingleActiveConsumer && cfg.MaxAckPending != 1 {
		return fmt.Errorf("nats: queue %s: consumer %s of stream %s has MaxAckPending %d: %w: ordering park and block need MaxAckPending 1 (one message handed out at a time, in stream order); set it with 'nats consumer edit %s %s --max-pending=1', or use ordering \"reorder\"",
			queue, b.Consumer, b.Stream, cfg.MaxAckPending, transport.ErrUnsafeQueue, b.Stream, b.Consumer)
	}
	if cfg.MaxDeliver > 0 {
		t.opts.Logger.Warn("nats: adopted consumer has MaxDeliver: the server stops delivering a message at it, retries included, and only its MAX_DELIVERIES advisory tells",
			"queue", queue, "stream", b.Stream, "consumer", b.Consumer, "max_deliver", cfg.MaxDeliver)
	}
	return nil
}

func (t *Transport) declareDeadLetters(ctx context.Context, q transport.QueueSpec) error {
	cfg := jetstream.StreamConfig{Name: DeadLetterStream(q.Name), Subjects: []string{DeadLetterSubject(q.Name)},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: t.opts.Replicas, AllowDirect: true}
	if q.DLQMaxLength > 0 {
		// Full: refuse the dead-letter copy (the original stays held, or
		// ledger.Accounted stores it in the catalog), never drop an older
		// dead letter.
		cfg.MaxMsgs, cfg.Discard = q.DLQMaxLength, jetstream.DiscardNew
	}
	if _, err := t.js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("nats: declare dead-letter stream %s of queue %s: %w", cfg.Name, q.Name, err)
	}
	return nil
}

func (t *Transport) declareRetryStream(ctx context.Context) error {
	_, err := t.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: t.opts.RetryStream, Subjects: []string{retrySubjects},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: t.opts.Replicas, AllowDirect: true,
		MaxMsgsPerSubject: 1})
	if err != nil {
		return fmt.Errorf("nats: declare retry stream %s (subjects %s): %w", t.opts.RetryStream, retrySubjects, err)
	}
	return nil
}

// DeleteQueue deletes what Declare created for queue: its stream, its
// dead-letter stream and its retry records (a test's teardown, 'lily
// topology' removals). An adopted queue's stream is left alone.
func (t *Transport) DeleteQueue(ctx context.Context, spec transport.QueueSpec) error {
	b := t.QueueBinding(spec.Name)
	defer t.forget(spec.Name)
	var errs []error
	names := []string{DeadLetterStream(spec.Name)}
	if _, adopted := t.opts.Queues[spec.Name]; !adopted {
		names = append(names, b.Stream)
	}
	for _, name := range names {
		if err := t.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("nats: delete stream %s: %w", name, err))
		}
	}
	if rs, err := t.js.Stream(ctx, t.opts.RetryStream); err == nil {
		if err := rs.Purge(ctx, jetstream.WithPurgeSubject(retryPrefix(b)+">")); err != nil {
			errs = append(errs, fmt.Errorf("nats: purge retry records of %s: %w", spec.Name, err))
		}
	}
	return errors.Join(errs...)
}
