package config_test

import (
	"fmt"

	"github.com/lily-mq/lily/config"
)

// ParseConfig applies defaults to absent keys and takes a 0 as written.
func ExampleParseConfig() {
	cfg, err := config.ParseConfig([]byte(`
[[queue]]
name = "orders.created"
retry_attempts = 3
max_redrives = 0 # every redrive is a manual decision
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	q, _ := cfg.Queue("orders.created")
	s := q.Settings()
	fmt.Println("delivery_limit", s.DeliveryLimit, "max_redrives", s.MaxRedrives, "buckets", q.Policy().Buckets())
	// Output:
	// delivery_limit 5 max_redrives 0 buckets [1000 2000 4000]
}

// A refusal names the queue, the TOML key, what it wants, what the file
// gives and the line.
func ExampleParseConfig_refusal() {
	_, err := config.ParseConfig([]byte(`[[queue]]
name = "orders.created"
retry_attempts = "3"
`))
	fmt.Println(err)
	_, err = config.ParseConfig([]byte(`[[queue]]
name = "orders.created"
delivery_limit = 0
`))
	fmt.Println(err)
	// Output:
	// invalid configuration: queue "orders.created": retry_attempts: want an integer, got the string "3" (line 3)
	// invalid configuration: queue "orders.created": delivery_limit = 0: must be in 1..1000 (the hand-overs of one copy before it is dead-lettered)
}
