package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/lily-mq/lily/transport"
)

// Settle applies the settlements (in parallel; each in the safe order):
// Ack deletes the message; Retry sends a copy with DelaySeconds to the
// queue, then deletes the original; DeadLetter sends a copy with evidence
// to "<queue>-dlq", then deletes the original; Release changes the
// message's visibility to the delay (0: at once). A copy that was not
// confirmed leaves the original in place (it comes back after its
// visibility timeout). A receipt SQS no longer honours is
// transport.ErrLeaseLost. Under p.FailRefused a dead-letter copy over
// MaxMessageSize (a large original with its evidence) fails with
// transport.ErrDeadLetterRefused, so that ledger.Accounted stores the dead
// letter in the catalog and then acknowledges the original.
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	return transport.SettleErrorOf(t.parallelEach(len(p.Settlements), func(i int) error { return t.settle(ctx, &p.Settlements[i], p.FailRefused) }))
}

func (t *Transport) settle(ctx context.Context, s *transport.Settlement, failRefused bool) error {
	d := s.Delivery
	rc, ok := d.Receipt.(*receipt)
	if !ok {
		return fmt.Errorf("sqs: settle %s: delivery was not received from this transport", d.EventID)
	}
	switch s.Action {
	case transport.Ack:
	case transport.Retry, transport.DeadLetter:
		target, url := rc.queue, rc.url
		var delay = s.Delay
		if s.Action == transport.DeadLetter {
			target, delay = DeadLetterQueue(rc.queue), 0
			var err error
			if url, err = t.queueURL(ctx, target); err != nil {
				return fmt.Errorf("sqs: dead-letter %s: %w (original kept)", d.EventID, err)
			}
		}
		w, err := encode(d.EventID, d.Key, d.Type, d.Body, s.Headers, rc.types)
		if err != nil {
			return fmt.Errorf("sqs: %s %s: %w (original kept)", s.Action, d.EventID, err)
		}
		// The copy's deduplication ID (FIFO) is that of this received
		// copy: sending it twice (a retried settlement) enqueues it
		// once, while a later dead-lettering of the same event (after a
		// redrive) is not mistaken for a duplicate.
		if s.Action == transport.DeadLetter && failRefused {
			// SQS refuses a message over MaxMessageSize (body and
			// attributes): the evidence can push a large original over
			// it. Say so before sending, so that the caller stores the
			// dead letter in the catalog (SettleParams.FailRefused).
			if n := wireSize(w); n > MaxMessageSize {
				return fmt.Errorf("sqs: dead-letter %s: %w: the copy with its evidence takes %d bytes, over SQS's message size limit of %d, so %s cannot take it (original kept)",
					d.EventID, transport.ErrDeadLetterRefused, n, MaxMessageSize, target)
			}
		}
		if err := t.send(ctx, url, target, w, d.MessageID+":"+s.Action.String(), d.Key, delay); err != nil {
			if s.Action == transport.DeadLetter && failRefused && isTooLarge(err) {
				return fmt.Errorf("sqs: dead-letter %s to %s: %w: the copy is over the queue's message size limit: %w (original kept)", d.EventID, target, transport.ErrDeadLetterRefused, err)
			}
			return fmt.Errorf("sqs: %s %s to %s: %w (original kept)", s.Action, d.EventID, target, err)
		}
	case transport.Release:
		err := t.visibility(ctx, rc, seconds(s.Delay))
		if err == nil {
			t.unhold(rc)
		}
		return err
	default:
		return fmt.Errorf("sqs: settle %s: unknown action %d", d.EventID, s.Action)
	}
	_, err := t.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(rc.url), ReceiptHandle: aws.String(rc.handle)})
	if err != nil {
		if isLeaseLost(err) {
			t.unhold(rc)
			return fmt.Errorf("sqs: delete %s from %s: %w: %w", d.EventID, rc.queue, transport.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: delete %s from %s: %w", d.EventID, rc.queue, err)
	}
	t.unhold(rc)
	return nil
}

// visibility changes a received message's visibility timeout.
func (t *Transport) visibility(ctx context.Context, rc *receipt, secs int32) error {
	_, err := t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(rc.url), ReceiptHandle: aws.String(rc.handle), VisibilityTimeout: secs})
	if err != nil {
		if isLeaseLost(err) {
			t.unhold(rc)
			return fmt.Errorf("sqs: change visibility on %s: %w: %w", rc.queue, transport.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: change visibility on %s: %w", rc.queue, err)
	}
	return nil
}

func (t *Transport) unhold(rc *receipt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.held[rc.consumer]; h != nil {
		delete(h, rc.handle)
		if len(h) == 0 {
			delete(t.held, rc.consumer)
		}
	}
}

// ExtendLeases sets the visibility timeout of the deliveries to p.For
// (rounded up to whole seconds, at most 12 hours) with
// ChangeMessageVisibility.
func (t *Transport) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	secs := seconds(min(p.For, MaxVisibility))
	return transport.SettleErrorOf(t.parallelEach(len(p.Deliveries), func(i int) error {
		rc, ok := p.Deliveries[i].Receipt.(*receipt)
		if !ok {
			return fmt.Errorf("sqs: extend %s: delivery was not received from this transport", p.Deliveries[i].EventID)
		}
		return t.visibility(ctx, rc, secs)
	}))
}

// RecoverLeases makes every message the consumer instance holds (received
// and not settled, including those kept from an isolated batch) visible at
// once. Their receive counts stay raised. It returns how many it released.
func (t *Transport) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	t.mu.Lock()
	var rcs []*receipt
	for _, rc := range t.held[p.Consumer] {
		rcs = append(rcs, rc)
	}
	t.stash.RemoveConsumer(p.Consumer)
	t.mu.Unlock()
	n := 0
	var errs []error
	for _, rc := range rcs {
		err := t.visibility(ctx, rc, 0)
		switch {
		case err == nil:
			n++
			t.unhold(rc)
		case errors.Is(err, transport.ErrLeaseLost):
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// StopConsumer gives back what the consumer instance received and never
// handed out (kept from an isolated batch): visible again at once. SQS
// counted their receive already; it cannot be undone.
func (t *Transport) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	t.mu.Lock()
	ds := t.stash.Remove(p.Consumer, p.Queue)
	delete(t.wary, p.Consumer)
	t.mu.Unlock()
	var errs []error
	for _, d := range ds {
		rc := d.Receipt.(*receipt)
		if err := t.visibility(ctx, rc, 0); err != nil && !errors.Is(err, transport.ErrLeaseLost) {
			errs = append(errs, err)
		}
		t.unhold(rc)
	}
	return errors.Join(errs...)
}

// errorCode is the AWS error code of err ("" when none).
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isLeaseLost reports whether SQS refused a receipt handle.
func isLeaseLost(err error) bool {
	switch c := errorCode(err); {
	case strings.Contains(c, "ReceiptHandleIsInvalid"), strings.Contains(c, "MessageNotInflight"),
		strings.Contains(c, "InvalidReceiptHandle"), strings.Contains(c, "MessageDoesNotExist"):
		return true
	}
	return false
}

// isNotFound reports whether SQS says the queue does not exist.
// isTooLarge reports SQS's refusal of a message over its size limit.
func isTooLarge(err error) bool {
	c := errorCode(err)
	return strings.Contains(c, "MessageTooBig") || strings.Contains(c, "MessageTooLong") ||
		(strings.Contains(c, "InvalidParameterValue") && strings.Contains(err.Error(), "shorter than"))
}

// MaxMessageSize is SQS's limit on one message: body and attributes (names,
// data types and values) together, 256 KiB.
const MaxMessageSize = 262144

// wireSize is the size SQS counts for w against MaxMessageSize.
func wireSize(w wireMessage) int {
	n := len(w.Body)
	for k, a := range w.Attrs {
		n += len(k) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
	}
	return n
}

func isNotFound(err error) bool {
	c := errorCode(err)
	return strings.Contains(c, "NonExistentQueue") || strings.Contains(c, "QueueDoesNotExist") || strings.Contains(c, "QueueNotFound")
}
