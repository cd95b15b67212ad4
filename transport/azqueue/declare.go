package azqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/lily-mq/lily/transport"
)

// CheckSpec returns every reason the queue cannot be declared on Storage
// queues: its name, and a retry delay over the service's 7-day visibility
// limit (a retry is the message made invisible for its delay).
func CheckSpec(q transport.QueueSpec) error {
	var errs []error
	if err := CheckQueueName(q.Name); err != nil {
		errs = append(errs, err)
	}
	for _, ms := range q.BucketsMillis {
		if d := time.Duration(ms) * time.Millisecond; d > MaxVisibility {
			errs = append(errs, fmt.Errorf("azqueue: queue %s: retry delay %s exceeds the service's visibility timeout limit of %s (7 days): lower max_retry_backoff_millis (or retry_delays_millis) to at most 604800000", q.Name, d, MaxVisibility))
			break
		}
	}
	return errors.Join(errs...)
}

// Declare creates each queue and its DLQ "<queue>-dlq". It is idempotent.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	for _, q := range p.Queues {
		if err := CheckSpec(q); err != nil {
			return err
		}
	}
	for _, q := range p.Queues {
		t.specs.Register(q)
		for _, name := range []string{DeadLetterQueue(q.Name), QueueName(q.Name)} {
			if err := t.create(ctx, name); err != nil {
				return fmt.Errorf("azqueue: create queue %s (Storage name %s): %w", q.Name, name, err)
			}
		}
	}
	return nil
}

// create creates a Storage queue; one that exists is fine.
func (t *Transport) create(ctx context.Context, name string) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if _, err := t.service.CreateQueue(ctx, name, nil); err != nil && !queueerror.HasCode(err, queueerror.QueueAlreadyExists) {
		return err
	}
	return nil
}

// Register remembers queue specs without declaring them (a consumer of
// queues made by 'lily topology apply').
func (t *Transport) Register(specs ...transport.QueueSpec) { t.specs.Register(specs...) }

// DeleteQueues deletes the queues and their DLQs (test teardown; 'lily
// topology' never calls it).
func (t *Transport) DeleteQueues(ctx context.Context, queues ...string) error {
	var errs []error
	for _, q := range queues {
		for _, n := range []string{QueueName(q), DeadLetterQueue(q)} {
			if _, err := t.service.DeleteQueue(ctx, n, nil); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("azqueue: delete queue %s (Storage name %s): %w", q, n, err))
			}
		}
	}
	return errors.Join(errs...)
}
