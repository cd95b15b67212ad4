package livelint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
)

// SQSQueueState is one sqs queue and its DLQ as SQS has them.
type SQSQueueState struct {
	// Queue is the Lily queue.
	Queue string
	// Exists and Attributes describe the queue; DLQExists and
	// DLQAttributes its "<queue>-dlq".
	Exists, DLQExists         bool
	Attributes, DLQAttributes map[string]string
}

// ReadSQS reads the attributes of the configuration's sqs queues and
// their DLQs through t.
func ReadSQS(ctx context.Context, cfg config.Config, t *sqs.Transport) ([]SQSQueueState, error) {
	var out []SQSQueueState
	for _, q := range cfg.WithDefaults().Queues {
		if q.Transport != lily.TransportSQS {
			continue
		}
		s := SQSQueueState{Queue: q.Name}
		var err error
		s.Attributes, err = t.Attributes(ctx, q.Name)
		s.Exists = err == nil
		if err != nil && !errors.Is(err, transport.ErrUnknownQueue) {
			return nil, err
		}
		s.DLQAttributes, err = t.Attributes(ctx, sqs.DeadLetterQueue(q.Name))
		s.DLQExists = err == nil
		if err != nil && !errors.Is(err, transport.ErrUnknownQueue) {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// CheckSQS judges the sqs queues as SQS has them: both queues exist; the
// redrive policy exists, with maxReceiveCount above delivery_limit (so that
// Lily dead-letters first, with evidence); a standard queue's DLQ keeps
// messages longer than the queue (SQS counts a moved message's age from
// its first enqueue, not from the move); the queue's visibility timeout is
// longer than the handler timeout.
func CheckSQS(cfg config.Config, states []SQSQueueState) []lint.Finding {
	cfg = cfg.WithDefaults()
	var out []lint.Finding
	for _, s := range states {
		q, ok := cfg.Queue(s.Queue)
		if !ok {
			continue
		}
		add := func(sev lint.Severity, code, what, why, fix string) {
			out = append(out, lint.Finding{Severity: sev, Queue: q.Name, Code: code, What: what, Why: why, Fix: fix})
		}
		if !s.Exists || !s.DLQExists {
			missing := sqs.QueueName(q.Name)
			if s.Exists {
				missing = sqs.QueueName(sqs.DeadLetterQueue(q.Name))
			}
			add(lint.Error, lint.CodeSQSQueueMissing, fmt.Sprintf("SQS queue %s does not exist", missing),
				"consumers of a missing queue receive nothing, and without its DLQ every dead-lettering fails: the original stays "+
					"in the queue and comes back until the redrive policy (if any) moves it without Lily's evidence",
				"run 'lily topology apply --config <file>'")
			continue
		}
		limit := q.Settings().DeliveryLimit
		rpRaw, has := s.Attributes["RedrivePolicy"]
		if !has || rpRaw == "" {
			add(lint.Warning, lint.CodeSQSNoRedrivePolicy, "the queue has no redrive policy",
				"Lily dead-letters at delivery_limit itself, but a consumer that never settles (one that crashes before it can, "+
					"a Lambda whose function times out) leaves a message that SQS then redelivers until its retention ends: "+
					"it is deleted silently, never dead-lettered",
				fmt.Sprintf("set a redrive policy to %s with maxReceiveCount %d ('lily topology apply' does)", sqs.QueueName(sqs.DeadLetterQueue(q.Name)), sqs.MaxReceiveCount(limit)))
		} else if rp, err := sqs.ParseRedrivePolicy(rpRaw); err == nil && rp.MaxReceiveCount <= limit {
			add(lint.Error, lint.CodeSQSMaxReceiveCountAtLimit,
				fmt.Sprintf("the redrive policy's maxReceiveCount = %d is not above delivery_limit = %d", rp.MaxReceiveCount, limit),
				"SQS moves a message to the DLQ on the receive after maxReceiveCount, before Lily sees the delivery that exceeds "+
					"delivery_limit: crash-type poison lands in the DLQ without Lily's evidence (no reason, error, consumer or "+
					"history; only the receive count), and a slow or released message is moved by the broker instead of "+
					"being dead-lettered or retried by Lily",
				fmt.Sprintf("set maxReceiveCount to %d (delivery_limit + 1) with 'lily topology apply'", sqs.MaxReceiveCount(limit)))
		}
		if !sqs.IsFIFO(q.Name) {
			src, e1 := strconv.Atoi(s.Attributes["MessageRetentionPeriod"])
			dlq, e2 := strconv.Atoi(s.DLQAttributes["MessageRetentionPeriod"])
			if e1 == nil && e2 == nil && dlq <= src {
				add(lint.Error, lint.CodeSQSDLQRetentionShort,
					fmt.Sprintf("the DLQ's MessageRetentionPeriod = %d s is not longer than the queue's %d s", dlq, src),
					"on a standard queue SQS counts a dead letter's age from when it was first sent, not from its move to the DLQ: "+
						"a message that spent most of its retention in the queue expires from the DLQ soon after it arrives, "+
						"before anyone ingests or looks at it, and is deleted without a record",
					fmt.Sprintf("set the DLQ's MessageRetentionPeriod above %d s (Lily declares 1209600, the maximum, 14 days) and "+
						"run 'lily serve' or 'lily dlq ingest' often enough to take dead letters into the catalog", src))
			}
		}
		if v, err := strconv.Atoi(s.Attributes["VisibilityTimeout"]); err == nil {
			out = append(out, lint.SQSVisibility(q, time.Duration(v)*time.Second, "the queue's VisibilityTimeout")...)
		}
	}
	return out
}
