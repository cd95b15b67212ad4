package config

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateSQSQueues: what SQS cannot carry is refused when the
// configuration is parsed, with the messages of transport/sqs's CheckSpec
// (package brokers checks that the two agree on more cases).
func TestValidateSQSQueues(t *testing.T) {
	for _, tc := range []struct {
		name, queue string
		want        []string // "" for a valid queue
	}{
		{"valid", `name = "orders.created"
transport = "sqs"`, nil},
		{"fifo without retries", `name = "pay.fifo"
transport = "sqs"
retry_attempts = 0`, nil},
		{"fifo with retries", `name = "pay.fifo"
transport = "sqs"
retry_attempts = 2`, []string{"sqs: queue pay.fifo: FIFO queues have no per-message DelaySeconds, so Lily cannot hold a retry: set retry_attempts = 0 for it (failures dead-letter at once) or use a standard queue"}},
		{"delay over 15 minutes", `name = "slow"
transport = "sqs"
retry_attempts = 1
retry_backoff_millis = 960000
max_retry_backoff_millis = 960000`, []string{"sqs: queue slow: retry delay 16m0s exceeds SQS's DelaySeconds limit of 15m0s: lower max_retry_backoff_millis (or retry_delays_millis) to at most 900000"}},
		{"name too long", `name = "` + strings.Repeat("a", 72) + `"
transport = "sqs"`, []string{`sqs: queue "` + strings.Repeat("a", 72) + `": SQS name "` + strings.Repeat("a", 72) + `-dlq" is not valid: at most 80 characters (DLQ suffix "-dlq" included) of letters, digits, '-' and '_' (dots become '-'), plus ".fifo" for a FIFO queue`}},
		{"long fifo with retries", `name = "` + strings.Repeat("b", 72) + `.fifo"
transport = "sqs"
retry_attempts = 1`, []string{`SQS name "` + strings.Repeat("b", 72) + `-dlq.fifo" is not valid`, "FIFO queues have no per-message DelaySeconds"}},
	} {
		_, err := ParseConfig([]byte("sqs_region = \"eu-west-1\"\n[[queue]]\n" + tc.queue + "\n"))
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", tc.name, w, err)
			}
		}
		if n := strings.Count(err.Error(), ErrInvalidConfig.Error()); n != len(tc.want) {
			t.Errorf("%s: %d problems, want %d:\n%v", tc.name, n, len(tc.want), err)
		}
	}
}
