package retry_test

import (
	"fmt"

	"github.com/lily-mq/lily/retry"
)

// The example of docs/design.md §5: three retries from 1 s, doubling, with
// 20% jitter.
func Example() {
	p := retry.Policy{
		Attempts:         3,
		BackoffMillis:    retry.DefaultBackoffMillis,
		MaxBackoffMillis: retry.DefaultMaxBackoffMillis,
		JitterRatio:      0.2,
	}
	if err := p.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	for n := 1; n <= p.Attempts; n++ {
		fmt.Printf("retry %d: nominal %d, candidates %v, order-42 waits %d\n",
			n, p.Nominal(n), p.Candidates(n), p.Choose("order-42", n))
	}
	fmt.Println("buckets:", p.Buckets())
	fmt.Println("span:", p.Span())
	fmt.Println(retry.CheckBuckets("orders.created", p))
	// Output:
	// retry 1: nominal 1000, candidates [1000 1200], order-42 waits 1200
	// retry 2: nominal 2000, candidates [1600 2000 2400], order-42 waits 2000
	// retry 3: nominal 4000, candidates [3200 4000 4800], order-42 waits 4800
	// buckets: [1000 1200 1600 2000 2400 3200 4000 4800]
	// span: 7000
	// <nil>
}

// Validate reports every problem at once, naming the TOML settings.
func ExamplePolicy_Validate() {
	p := retry.Policy{Attempts: 101, BackoffMillis: 1000, MaxBackoffMillis: 500, JitterRatio: 0.6}
	fmt.Println(p.Validate())
	// Output:
	// retry_attempts 101: must be an integer in 0..100
	// max_retry_backoff_millis 500: must be >= retry_backoff_millis (1000)
	// retry_jitter_ratio 0.6: must be a finite number in 0.0..0.5
}
