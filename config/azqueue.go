package config

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/lily-mq/lily"
)

// Defaults of the Azure Storage queue settings.
const (
	// DefaultAzQueueURL is azqueue_url's default: Azurite's queue service
	// for its development account.
	DefaultAzQueueURL = "http://127.0.0.1:10001/devstoreaccount1"
	// DefaultAzQueueAccount is azqueue_account's default (Azurite's).
	DefaultAzQueueAccount = "devstoreaccount1"
	// DefaultAzQueueVisibilityTimeoutSeconds is
	// azqueue_visibility_timeout_seconds' default.
	DefaultAzQueueVisibilityTimeoutSeconds = 30
	// DefaultFunctionsMaxDequeueCount is max_dequeue_count's default: Azure
	// Functions' queue trigger default (host.json extensions.queues).
	DefaultFunctionsMaxDequeueCount = 5
	// AzQueueMaxDelay is the service's longest visibility timeout, the
	// longest retry delay of an azqueue queue (7 days).
	AzQueueMaxDelay = 7 * 24 * time.Hour
)

// AzQueueServiceURL returns azqueue_url, or its default.
func (c Config) AzQueueServiceURL() string {
	if c.AzQueueURL == "" {
		return DefaultAzQueueURL
	}
	return c.AzQueueURL
}

// AzQueueAccountName returns azqueue_account, or its default.
func (c Config) AzQueueAccountName() string {
	if c.AzQueueAccount == "" {
		return DefaultAzQueueAccount
	}
	return c.AzQueueAccount
}

// AzQueueVisibilityTimeout returns azqueue_visibility_timeout_seconds as a
// duration, or its default.
func (c Config) AzQueueVisibilityTimeout() time.Duration {
	if c.AzQueueVisibilityTimeoutSeconds == nil {
		return DefaultAzQueueVisibilityTimeoutSeconds * time.Second
	}
	return time.Duration(*c.AzQueueVisibilityTimeoutSeconds) * time.Second
}

// MaxDequeueCountOrDefault is an azure-functions entry's max_dequeue_count,
// or Functions' default of 5.
func (f ForeignDLQConfig) MaxDequeueCountOrDefault() int {
	if f.MaxDequeueCount <= 0 {
		return DefaultFunctionsMaxDequeueCount
	}
	return f.MaxDequeueCount
}

// storageQueueName is what the service accepts as a queue name.
var storageQueueName = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$`)

// validateAzQueue checks the Azure settings and the retry delays of the
// azqueue queues: a retry waits in the queue as an invisible message, and
// the service's visibility timeout stops at 7 days.
func (c Config) validateAzQueue() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if c.AzQueueURL != "" {
		if u, err := url.Parse(c.AzQueueURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(`azqueue_url = %q: want an http(s) URL such as "https://<account>.queue.core.windows.net/" or Azurite's %q`, c.AzQueueURL, DefaultAzQueueURL)
		}
	}
	if v := c.AzQueueVisibilityTimeoutSeconds; v != nil && (*v < 1 || *v > int(AzQueueMaxDelay/time.Second)) {
		bad("azqueue_visibility_timeout_seconds = %d: must be 1..604800 (the service's range, up to 7 days)", *v)
	}
	for _, q := range c.Queues {
		if q.Transport != lily.TransportAzQueue || q.Validate() != nil {
			continue
		}
		for _, ms := range q.Spec().BucketsMillis {
			if d := time.Duration(ms) * time.Millisecond; d > AzQueueMaxDelay {
				bad("queue %q: retry delay %s exceeds the Storage queue visibility timeout limit of %s (7 days): lower max_retry_backoff_millis (or retry_delays_millis) to at most 604800000", q.Name, d, AzQueueMaxDelay)
				break
			}
		}
	}
	return errs
}
