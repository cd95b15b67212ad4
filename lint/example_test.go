package lint_test

import (
	"fmt"
	"os"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
)

// Static judges a configuration alone. This queue retries for 7 seconds
// but declares that its dependency may be down for 10 minutes.
func Example() {
	cfg, err := config.ParseConfig([]byte(`
[[queue]]
name = "orders.created"
owner = "orders-team"
retry_attempts = 3
expected_outage = "10m"
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := lint.NewReport(lint.Static(cfg))
	for _, f := range r.Findings {
		fmt.Printf("%s %s %s: %s\n", f.Severity, f.Queue, f.Code, f.What)
	}
	fmt.Printf("errors %d, warnings %d, exit 1: %t\n", r.Errors, r.Warnings, r.Failed(false))
	// Output:
	// error orders.created retry-span-short: the retry span of its 4 attempts, 7 s, is shorter than expected_outage = "10m", 600 s (10 min)
	// errors 1, warnings 0, exit 1: true
}

// WriteText prints the findings for people, grouped by queue.
func ExampleReport_WriteText() {
	cfg, _ := config.ParseConfig([]byte(`
[[queue]]
name = "billing.invoiced"
owner = "billing"
retry_attempts = 2
delivery_limit = 1
`))
	_ = lint.NewReport(lint.Static(cfg)).WriteText(os.Stdout)
	// Output:
	// queue billing.invoiced
	//   warning delivery-limit-one: delivery_limit = 1: one redelivery dead-letters a message
	//           why: one crash, scale-in, lost connection or released delivery (handler_timeout_millis) dead-letters the message, and every innocent message in flight with a crashed process (the prefetch window, the leased batch) is dead-lettered with it: Lily's cautious one-at-a-time mode after a crash needs a second delivery to work
	//           fix: set delivery_limit to at least 2; the default is 5
	//
	// 0 errors, 1 warning, 0 infos
}
