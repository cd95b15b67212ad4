package plan_test

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily/plan"
)

// The outage of seed 000's worked example: 2000 messages/s, a 10-minute
// ledger outage, five attempts a fixed minute apart.
func ExampleOutage() {
	s, _ := plan.FixedInterval(5, 60*time.Second)
	r, err := plan.Outage(plan.OutageParams{Rate: 2000, Outage: 10 * time.Minute, Schedule: s})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("retry span (s):", r.RetrySpanS)
	fmt.Println("dead-lettered:", r.DeadLettered)
	fmt.Println("circulating at the end:", r.CirculatingAtEnd)
	fmt.Println("extra receives per second:", *r.ExtraReceivesPerS)

	// Lily's exponential schedule: retry_backoff_millis 30000,
	// max_retry_backoff_millis 240000, retry_attempts 4 (five attempts).
	s, _ = plan.Backoff(5, 30000, 240000)
	r, _ = plan.Outage(plan.OutageParams{Rate: 2000, Outage: 10 * time.Minute, Schedule: s})
	fmt.Println("delays (s):", r.DelaysS, "span (s):", r.RetrySpanS, "dead-lettered:", r.DeadLettered)
	// Output:
	// retry span (s): 240
	// dead-lettered: 720000
	// circulating at the end: 480000
	// extra receives per second: 8000
	// delays (s): [30 60 120 240] span (s): 450 dead-lettered: 300000
}

// Independent failures: each attempt fails with probability 1%.
func ExampleIndependent() {
	for _, k := range []int{3, 5} {
		r, _ := plan.Independent(plan.IndependentParams{Rate: 2000, FailureProb: 0.01, Attempts: k})
		fmt.Printf("k=%d: %s a day out of %s\n", k,
			plan.FormatNumber(r.DeadLetteredPerDay), plan.FormatNumber(r.DailyVolume))
	}
	// Output:
	// k=3: 172.8 a day out of 172,800,000
	// k=5: 0.01728 a day out of 172,800,000
}

// Crash-type poison: one message in 100,000 crashes its handler after 2 s
// and is redelivered every minute.
func ExamplePoison() {
	r, _ := plan.Poison(plan.PoisonParams{
		Rate: 2000, PoisonFraction: 1e-5, CrashAfter: 2 * time.Second, Redelivery: time.Minute,
		Attempts: 5, HandlerTime: 50 * time.Millisecond,
	})
	fmt.Println("poison per day:", r.PoisonPerDay)
	fmt.Println("handlers burnt after one day without a limit:", r.HandlersBurntAfterOneDay)
	fmt.Println("handler-seconds per poison message with 5 attempts:", *r.HandlerSecondsPerPoison)
	fmt.Println("healthy concurrency:", *r.HealthyConcurrency)
	// Output:
	// poison per day: 1728
	// handlers burnt after one day without a limit: 57.6
	// handler-seconds per poison message with 5 attempts: 10
	// healthy concurrency: 100
}

// Blocking retries of 1, 2, 4, 8 and 16 s on a log.
func ExamplePartition() {
	s, _ := plan.ExplicitDelays([]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second})
	r, _ := plan.Partition(plan.PartitionParams{
		Schedule: s, HandlerTime: 50 * time.Millisecond,
		PartitionRate: 20, PoisonPerDay: 1728, Partitions: 100,
	})
	b, n := r.Blocking, r.NonBlocking
	fmt.Printf("blocking:     stall %s s, backlog %s, %s stalls a day, %s s lost a day\n",
		plan.FormatNumber(b.StallPerPoisonS), plan.FormatNumber(b.BacklogRecords),
		plan.FormatNumber(b.StallsPerPartitionPerDay), plan.FormatNumber(b.LostPerPartitionPerDayS))
	fmt.Printf("non-blocking: stall %s s, backlog %s, %s stalls a day, %s s lost a day\n",
		plan.FormatNumber(n.StallPerPoisonS), plan.FormatNumber(n.BacklogRecords),
		plan.FormatNumber(n.StallsPerPartitionPerDay), plan.FormatNumber(n.LostPerPartitionPerDayS))
	// Output:
	// blocking:     stall 31.3 s, backlog 626, 17.28 stalls a day, 540.86 s lost a day
	// non-blocking: stall 0.05 s, backlog 1, 17.28 stalls a day, 0.864 s lost a day
}

// The threshold experiment of seed 003.
func ExampleThresholds() {
	d, _ := plan.ParseDistribution("1:9,3:5,5:4,never:2")
	r, _ := plan.Thresholds(d, []int{1, 2, 3, 5, 8})
	fmt.Println("threshold processed wasted wrongly permanent")
	for _, row := range r.Rows {
		fmt.Println(row.Threshold, row.Processed, row.WastedAttempts, row.WronglyIsolated, row.PermanentlyFailingIsolated)
	}
	fmt.Println("recommended:", r.RecommendedThreshold, "= retry_attempts", r.RecommendedRetryAttempts)
	// Output:
	// threshold processed wasted wrongly permanent
	// 1 9 11 9 2
	// 2 9 22 9 2
	// 3 14 28 4 2
	// 5 18 36 0 2
	// 8 18 42 0 2
	// recommended: 5 = retry_attempts 4
}
