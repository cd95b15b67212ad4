package lint

import (
	"slices"
	"strings"
	"testing"
)

func TestStaticPubSub(t *testing.T) {
	cases := []struct {
		name, toml string
		want       []string
	}{
		{"no retries, defaults", `pubsub_project = "p"
[[queue]]
name = "orders.created"
owner = "orders"
transport = "pubsub"
`, nil},
		{"no margin, rounded and long delays", `pubsub_project = "p"
pubsub_max_delivery_attempts = 6
[[queue]]
name = "orders.created"
owner = "orders"
transport = "pubsub"
delivery_limit = 5
retry_attempts = 2
retry_delays_millis = [1500, 900000]
`, []string{"warning pubsub-max-attempts", "info pubsub-retry-hops", "info pubsub-retry-rounded", "info pubsub-retry-needs-consumer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, code := range codes(Static(parse(t, c.toml))) {
				if strings.Contains(code, "pubsub") {
					got = append(got, code)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("pubsub findings %v, want %v", got, c.want)
			}
		})
	}
}

// TestStaticPubSubRetention: a delay past the subscriptions' 7-day
// retention is an error (the copy would expire), and max_delivery_attempts
// at or below delivery_limit too (the config refuses it; lint explains it).
func TestStaticPubSubRetention(t *testing.T) {
	fs := pubsubFindings(parse(t, `pubsub_project = "p"
[[queue]]
name = "orders.created"
owner = "orders"
transport = "pubsub"
retry_attempts = 1
retry_delays_millis = [604800001]
`))
	if got := codes(fs); !slices.Contains(got, "error pubsub-retry-retention") {
		t.Errorf("findings %v, want error pubsub-retry-retention", got)
	}
}
