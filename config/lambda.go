package config

import (
	"fmt"
	"strings"
)

// LambdaConfig is a [[lambda]] entry: the asynchronous invocation settings
// of an AWS Lambda function (aws lambda get-function-event-invoke-config,
// and the function's DeadLetterConfig), which 'lily lint' judges: an event
// whose retries are exhausted, or that grew too old, goes to the on-failure
// destination or the dead-letter queue — and with neither it is dropped,
// with no trace but a metric.
type LambdaConfig struct {
	// Function is the function's name or ARN. Required.
	Function string `toml:"function" json:"function"`
	// OnFailure is the ARN of the on-failure destination (an SQS queue,
	// SNS topic, EventBridge bus or function). Defaults to none.
	OnFailure string `toml:"on_failure" json:"on_failure,omitempty"`
	// DeadLetterQueue is the ARN of the function's dead-letter queue (SQS
	// or SNS). Defaults to none.
	DeadLetterQueue string `toml:"dead_letter_queue" json:"dead_letter_queue,omitempty"`
	// MaximumRetryAttempts is the function's retry attempts, 0..2.
	// Defaults to 2, Lambda's.
	MaximumRetryAttempts *int `toml:"maximum_retry_attempts" json:"maximum_retry_attempts,omitempty"`
}

// SQSQueueOfARN returns the queue name of an SQS ARN
// ("arn:aws:sqs:region:account:name"); ok false for another ARN.
func SQSQueueOfARN(arn string) (string, bool) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return "", false
	}
	return parts[5], true
}

// validateLambdas reports the problems of the [[lambda]] entries.
func (c Config) validateLambdas() []error {
	var errs []error
	for i, l := range c.Lambdas {
		where := fmt.Sprintf("[[lambda]] #%d", i+1)
		if strings.TrimSpace(l.Function) == "" {
			errs = append(errs, fmt.Errorf("%w: %s: function is required: the Lambda function's name or ARN", ErrInvalidConfig, where))
		}
		if r := l.MaximumRetryAttempts; r != nil && (*r < 0 || *r > 2) {
			errs = append(errs, fmt.Errorf("%w: %s: maximum_retry_attempts = %d: Lambda allows 0..2", ErrInvalidConfig, where, *r))
		}
		for field, arn := range map[string]string{"on_failure": l.OnFailure, "dead_letter_queue": l.DeadLetterQueue} {
			if arn != "" && !strings.HasPrefix(arn, "arn:") {
				errs = append(errs, fmt.Errorf("%w: %s: %s = %q: want an ARN (arn:aws:sqs:region:account:queue, ...)", ErrInvalidConfig, where, field, arn))
			}
		}
	}
	return errs
}
