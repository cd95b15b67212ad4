package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily/transport"
)

// MaxRetention is SQS's longest message retention (14 days): Lily's DLQs
// keep their messages that long, so that a standard queue's DLQ outlives
// its source (SQS counts a moved message's age from its first enqueue).
const MaxRetention = 14 * 24 * time.Hour

// RedrivePolicy is an SQS queue's redrive policy.
type RedrivePolicy struct {
	DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

// MaxReceiveCount is the maxReceiveCount Lily sets for a queue: above its
// delivery limit, so that Lily dead-letters first (with evidence) and the
// broker only catches what Lily never settles.
func MaxReceiveCount(deliveryLimit int) int { return deliveryLimit + 1 }

// CheckSpec returns every reason the queue cannot be declared on SQS.
func CheckSpec(q transport.QueueSpec) error {
	var errs []error
	if err := CheckQueueName(q.Name); err != nil {
		errs = append(errs, err)
	}
	for _, ms := range q.BucketsMillis {
		if d := time.Duration(ms) * time.Millisecond; d > MaxDelay {
			errs = append(errs, fmt.Errorf("sqs: queue %s: retry delay %s exceeds SQS's DelaySeconds limit of %s: lower max_retry_backoff_millis (or retry_delays_millis) to at most 900000", q.Name, d, MaxDelay))
			break
		}
	}
	if IsFIFO(q.Name) && len(q.BucketsMillis) > 0 {
		errs = append(errs, fmt.Errorf("sqs: queue %s: FIFO queues have no per-message DelaySeconds, so Lily cannot hold a retry: set retry_attempts = 0 for it (failures dead-letter at once) or use a standard queue", q.Name))
	}
	return errors.Join(errs...)
}

// Declare creates each queue's DLQ ("<queue>-dlq", 14 days' retention) and
// the queue itself (the transport's visibility timeout, and a redrive
// policy to the DLQ with maxReceiveCount = delivery_limit + 1), and sets
// those attributes on queues that exist. It is idempotent.
func (t *Transport) Declare(ctx context.Context, p *transport.DeclareParams) error {
	for _, q := range p.Queues {
		if err := CheckSpec(q); err != nil {
			return err
		}
	}
	for _, q := range p.Queues {
		t.specs.Register(q)
		dlq := DeadLetterQueue(q.Name)
		dattrs := map[string]string{"MessageRetentionPeriod": strconv.Itoa(int(MaxRetention / time.Second))}
		if IsFIFO(q.Name) {
			dattrs["FifoQueue"] = "true"
		}
		durl, err := t.create(ctx, dlq, dattrs)
		if err != nil {
			return err
		}
		arn, err := t.attribute(ctx, durl, types.QueueAttributeNameQueueArn)
		if err != nil {
			return fmt.Errorf("sqs: ARN of %s: %w", dlq, err)
		}
		limit := q.DeliveryLimit
		if limit <= 0 {
			limit = 5
		}
		rp, _ := json.Marshal(RedrivePolicy{DeadLetterTargetArn: arn, MaxReceiveCount: MaxReceiveCount(limit)})
		attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(seconds(t.opts.VisibilityTimeout))), "RedrivePolicy": string(rp)}
		if IsFIFO(q.Name) {
			attrs["FifoQueue"] = "true"
		}
		if _, err := t.create(ctx, q.Name, attrs); err != nil {
			return err
		}
	}
	return nil
}

// create creates a queue (or finds it) and sets attrs on it.
func (t *Transport) create(ctx context.Context, queue string, attrs map[string]string) (string, error) {
	create := map[string]string{}
	if v, ok := attrs["FifoQueue"]; ok {
		create["FifoQueue"] = v
	}
	out, err := t.client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(QueueName(queue)), Attributes: create})
	if err != nil {
		return "", fmt.Errorf("sqs: create queue %s (SQS name %s): %w", queue, QueueName(queue), err)
	}
	url := aws.ToString(out.QueueUrl)
	set := map[string]string{}
	for k, v := range attrs {
		if k != "FifoQueue" {
			set[k] = v
		}
	}
	if len(set) > 0 {
		if _, err := t.client.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: set}); err != nil {
			return "", fmt.Errorf("sqs: set attributes of %s: %w", queue, err)
		}
	}
	t.mu.Lock()
	t.urls[queue] = url
	t.mu.Unlock()
	return url, nil
}

// attribute reads one queue attribute.
func (t *Transport) attribute(ctx context.Context, url string, name types.QueueAttributeName) (string, error) {
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{name}})
	if err != nil {
		return "", err
	}
	return out.Attributes[string(name)], nil
}

// Attributes returns the attributes of a Lily queue (or DLQ) name.
func (t *Transport) Attributes(ctx context.Context, queue string) (map[string]string, error) {
	url, err := t.queueURL(ctx, queue)
	if err != nil {
		return nil, err
	}
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		return nil, fmt.Errorf("sqs: attributes of %s: %w", queue, err)
	}
	return out.Attributes, nil
}

// DeleteQueues deletes the queues and their DLQs (test teardown, and
// 'lily topology' never calls it).
func (t *Transport) DeleteQueues(ctx context.Context, queues ...string) error {
	var errs []error
	for _, q := range queues {
		for _, n := range []string{q, DeadLetterQueue(q)} {
			url, err := t.queueURL(ctx, n)
			if errors.Is(err, transport.ErrUnknownQueue) {
				continue
			}
			if err == nil {
				_, err = t.client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("sqs: delete queue %s: %w", n, err))
			}
			t.forget(n)
		}
	}
	return errors.Join(errs...)
}
