package lint

import (
	"fmt"

	"github.com/lily-mq/lily/config"
)

// Codes of the Lambda asynchronous invocation checks ([[lambda]]).
const (
	// CodeLambdaNoFailureDestination (error): neither an on-failure
	// destination nor a dead-letter queue.
	CodeLambdaNoFailureDestination = "lambda-no-failure-destination"
	// CodeLambdaDestinationUndrained (warning): the on-failure destination
	// is an SQS queue that no [[foreign_dlq]] kind = "lambda-destination"
	// drains.
	CodeLambdaDestinationUndrained = "lambda-destination-undrained"
)

// lambdaFindings judges the [[lambda]] entries:
//
//   - lambda-no-failure-destination (error): neither on_failure nor
//     dead_letter_queue; an event whose retries are exhausted, or that
//     waited longer than its maximum age, is dropped.
//   - lambda-destination-undrained (warning): on_failure is an SQS queue
//     that no [[foreign_dlq]] kind = "lambda-destination" drains: the
//     records wait there unseen until the queue's retention deletes them.
func lambdaFindings(cfg config.Config) []Finding {
	drained := map[string]bool{}
	for _, f := range cfg.ForeignDLQs {
		if f.Kind == config.ForeignLambdaDestination {
			drained[f.Queue] = true
		}
	}
	var out []Finding
	for _, l := range cfg.Lambdas {
		retries := 2
		if l.MaximumRetryAttempts != nil {
			retries = *l.MaximumRetryAttempts
		}
		if l.OnFailure == "" && l.DeadLetterQueue == "" {
			out = append(out, Finding{Severity: Error, Queue: l.Function, Code: CodeLambdaNoFailureDestination,
				What: fmt.Sprintf("function %s has neither an on-failure destination (on_failure) nor a dead-letter queue (dead_letter_queue)", l.Function),
				Why: fmt.Sprintf("an asynchronous event that fails %d retries, or waits past its maximum event age, is discarded by Lambda: "+
					"no copy anywhere, only the AsyncEventsDropped metric", retries),
				Fix: "add an on-failure destination (aws lambda put-function-event-invoke-config --destination-config " +
					"'{\"OnFailure\":{\"Destination\":\"arn:aws:sqs:...\"}}'), an SQS queue that Lily drains with [[foreign_dlq]] " +
					"kind = \"lambda-destination\"; the record keeps the event and the error"})
			continue
		}
		if q, ok := config.SQSQueueOfARN(l.OnFailure); ok && !drained[q] {
			out = append(out, Finding{Severity: Warning, Queue: l.Function, Code: CodeLambdaDestinationUndrained,
				What: fmt.Sprintf("function %s sends failed events to the SQS queue %s, which no [[foreign_dlq]] drains", l.Function, q),
				Why:  "the on-failure records wait there unseen, and SQS deletes them when the queue's retention (4 days by default) runs out",
				Fix:  fmt.Sprintf("add [[foreign_dlq]] queue = %q, kind = \"lambda-destination\", so that 'lily serve' takes them into the catalog", q)})
		}
	}
	return out
}
