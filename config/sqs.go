package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/lily-mq/lily"
)

// DefaultSQSVisibilityTimeoutSeconds is sqs_visibility_timeout_seconds'
// default.
const DefaultSQSVisibilityTimeoutSeconds = 30

// SQSVisibilityTimeout returns sqs_visibility_timeout_seconds as a
// duration, or its default.
func (c Config) SQSVisibilityTimeout() time.Duration {
	if c.SQSVisibilityTimeoutSeconds == nil {
		return DefaultSQSVisibilityTimeoutSeconds * time.Second
	}
	return time.Duration(*c.SQSVisibilityTimeoutSeconds) * time.Second
}

// validateSQS checks the SQS settings and what SQS cannot carry of the sqs
// queues: names, retry delays over 15 minutes, retries on FIFO queues.
func (c Config) validateSQS() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	switch c.SQSProtocol {
	case "", "json", "query":
	default:
		bad(`sqs_protocol = %q: must be "json" (AWS) or "query" (emulators that speak only the Query protocol, such as goaws)`, c.SQSProtocol)
	}
	if c.SQSEndpoint != "" {
		if u, err := url.Parse(c.SQSEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(`sqs_endpoint = %q: want an http(s) URL such as "https://sqs.eu-west-1.amazonaws.com" or "http://127.0.0.1:4100"`, c.SQSEndpoint)
		}
	}
	if v := c.SQSVisibilityTimeoutSeconds; v != nil && (*v < 1 || *v > 43200) {
		bad("sqs_visibility_timeout_seconds = %d: must be 1..43200 (SQS's range, up to 12 hours)", *v)
	}
	for _, q := range c.Queues {
		if q.Transport != lily.TransportSQS || q.Validate() != nil {
			continue
		}
		if err := checkSQSQueue(q.Name, q.Spec().BucketsMillis); err != nil {
			for _, e := range unjoin(err) {
				bad("%s", e.Error())
			}
		}
	}
	return errs
}

// The SQS rules below are transport/sqs's CheckSpec, carried here so that
// parsing a configuration links no AWS SDK (package brokers' tests check
// that both give the same errors). SQS's limits and Lily's naming of SQS
// queues are wire contracts: they change in both places or in neither.

// sqsMaxDelay is SQS's longest DelaySeconds (sqs.MaxDelay).
const sqsMaxDelay = 15 * time.Minute

// sqsNamePattern is what SQS accepts as a queue name: alphanumerics,
// hyphens and underscores, ".fifo" at the end of a FIFO queue's name.
var sqsNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,75}(\.fifo)?$`)

// sqsQueueName is sqs.QueueName: each '.' but a FIFO queue's ".fifo"
// becomes '-'.
func sqsQueueName(queue string) string {
	base, fifo := strings.CutSuffix(queue, ".fifo")
	name := strings.ReplaceAll(base, ".", "-")
	if fifo {
		name += ".fifo"
	}
	return name
}

// sqsDeadLetterQueue is sqs.DeadLetterQueue: "<queue>-dlq", or
// "<base>-dlq.fifo" for a FIFO queue.
func sqsDeadLetterQueue(queue string) string {
	if base, ok := strings.CutSuffix(queue, ".fifo"); ok {
		return base + "-dlq.fifo"
	}
	return queue + "-dlq"
}

// checkSQSQueue is sqs.CheckSpec of the queue's spec (its name and retry
// delays, transport.QueueSpec.BucketsMillis): every reason the queue
// cannot be declared on SQS, its name (and its DLQ's), a retry delay over
// 15 minutes, retries on a FIFO queue.
func checkSQSQueue(name string, bucketsMillis []int64) error {
	var errs []error
	for _, n := range []string{sqsQueueName(name), sqsQueueName(sqsDeadLetterQueue(name))} {
		if len(n) > 80 || !sqsNamePattern.MatchString(n) {
			errs = append(errs, fmt.Errorf("sqs: queue %q: SQS name %q is not valid: at most 80 characters (DLQ suffix \"-dlq\" included) of letters, digits, '-' and '_' (dots become '-'), plus \".fifo\" for a FIFO queue", name, n))
			break
		}
	}
	for _, ms := range bucketsMillis {
		if d := time.Duration(ms) * time.Millisecond; d > sqsMaxDelay {
			errs = append(errs, fmt.Errorf("sqs: queue %s: retry delay %s exceeds SQS's DelaySeconds limit of %s: lower max_retry_backoff_millis (or retry_delays_millis) to at most 900000", name, d, sqsMaxDelay))
			break
		}
	}
	if strings.HasSuffix(name, ".fifo") && len(bucketsMillis) > 0 {
		errs = append(errs, fmt.Errorf("sqs: queue %s: FIFO queues have no per-message DelaySeconds, so Lily cannot hold a retry: set retry_attempts = 0 for it (failures dead-letter at once) or use a standard queue", name))
	}
	return errors.Join(errs...)
}
