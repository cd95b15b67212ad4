package config

import (
	"fmt"
	"net/url"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport/sqs"
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
		if err := sqs.CheckSpec(q.Spec()); err != nil {
			for _, e := range unjoin(err) {
				bad("%s", e.Error())
			}
		}
	}
	return errs
}
