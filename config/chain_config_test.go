package config

import (
	"slices"
	"strings"
	"testing"
)

// TestDelayChainConfig: retry_delays_millis is an alternative to the
// exponential form; writing both is refused, naming both fields; the chain
// drives the buckets of the queue's topology.
func TestDelayChainConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
[[queue]]
name = "orders.created"
retry_attempts = 4
retry_delays_millis = [10000, 60000, 600000]
retry_jitter_ratio = 0.1
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	q := c.Queues[0]
	if q.RetryBackoffMillis != nil || q.MaxRetryBackoffMillis != nil {
		t.Errorf("defaults filled the exponential form beside a chain: B=%v M=%v", q.RetryBackoffMillis, q.MaxRetryBackoffMillis)
	}
	if got, want := q.Spec().BucketsMillis, []int64{10000, 11000, 54000, 60000, 66000, 540000, 600000}; !slices.Equal(got, want) {
		t.Errorf("buckets %v, want %v", got, want)
	}
	if q.Policy().Nominal(4) != 600000 {
		t.Errorf("D(4) = %d, want the last delay repeated", q.Policy().Nominal(4))
	}
	for _, extra := range []string{"retry_backoff_millis = 1000", "max_retry_backoff_millis = 60000"} {
		_, err := ParseConfig([]byte("[[queue]]\nname = \"q\"\nretry_attempts = 3\nretry_delays_millis = [10000, 60000]\n" + extra + "\n"))
		if err == nil {
			t.Errorf("%s beside retry_delays_millis accepted", extra)
			continue
		}
		for _, want := range []string{`queue "q"`, "retry_delays_millis [10000, 60000]", "cannot be combined with " + extra, "a queue sets one form"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q lacks %q", extra, err, want)
			}
		}
	}
	if _, err := ParseConfig([]byte("[[queue]]\nname = \"q\"\nretry_delays_millis = [1000, 0]\n")); err == nil ||
		!strings.Contains(err.Error(), "delay 2 is 0") {
		t.Errorf("zero delay: %v", err)
	}
	// WithDefaults is idempotent with a chain (the consumer applies it again).
	if again := q.WithDefaults(); again.RetryBackoffMillis != nil || again.Validate() != nil {
		t.Errorf("WithDefaults twice: B=%v, %v", again.RetryBackoffMillis, again.Validate())
	}
}
