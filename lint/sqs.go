package lint

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// Codes of the SQS findings (Static for sqs queues, and livelint.CheckSQS).
const (
	// CodeSQSVisibilityBelowHandlerTimeout (warning): the visibility
	// timeout (sqs_visibility_timeout_seconds, or the queue's
	// VisibilityTimeout attribute) is not longer than handler_timeout_millis.
	CodeSQSVisibilityBelowHandlerTimeout = "sqs-visibility-below-handler-timeout"
	// CodeSQSQueueMissing (error): the queue or its DLQ does not exist.
	CodeSQSQueueMissing = "sqs-queue-missing"
	// CodeSQSNoRedrivePolicy (warning): the queue has no redrive policy.
	CodeSQSNoRedrivePolicy = "sqs-no-redrive-policy"
	// CodeSQSMaxReceiveCountAtLimit (error): the redrive policy's
	// maxReceiveCount is at or below delivery_limit.
	CodeSQSMaxReceiveCountAtLimit = "sqs-max-receive-count-at-limit"
	// CodeSQSDLQRetentionShort (error): a standard queue's DLQ keeps
	// messages no longer than the queue itself.
	CodeSQSDLQRetentionShort = "sqs-dlq-retention-short"
)

// staticSQS returns the static SQS findings of an sqs queue.
func staticSQS(cfg config.Config, q lily.QueueConfig) []Finding {
	if q.Transport != lily.TransportSQS {
		return nil
	}
	return SQSVisibility(q, cfg.SQSVisibilityTimeout(), "sqs_visibility_timeout_seconds")
}

// SQSVisibility returns the sqs-visibility-below-handler-timeout finding
// of q when the visibility timeout vis, named setting ("the queue's
// VisibilityTimeout" as SQS has it, or the configuration's
// sqs_visibility_timeout_seconds), is not longer than its handler timeout.
func SQSVisibility(q lily.QueueConfig, vis time.Duration, setting string) []Finding {
	timeout := time.Duration(q.Settings().HandlerTimeoutMillis) * time.Millisecond
	if vis > timeout {
		return nil
	}
	return []Finding{{Severity: Warning, Queue: q.Name, Code: CodeSQSVisibilityBelowHandlerTimeout,
		What: fmt.Sprintf("%s = %s is not longer than handler_timeout_millis = %d", setting, vis, q.Settings().HandlerTimeoutMillis),
		Why: "Lily extends the visibility of a delivery while its handler runs, but every consumer that does not (a Lambda " +
			"event source, another client, a Lily process stalled or partitioned from SQS) lets it run out: SQS hands the " +
			"message to another consumer while the first still works on it, so it is processed twice and its " +
			"ApproximateReceiveCount rises although nothing crashed, until a slow message is dead-lettered at delivery_limit",
		Fix: fmt.Sprintf("set %s above handler_timeout_millis (at least %d s; for a Lambda event source AWS advises six "+
			"times the function timeout), then 'lily topology apply'", setting, timeout/time.Second+1)}}
}
