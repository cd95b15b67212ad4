package plan

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// approx fails unless got is within tol of want.
func approx(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %v, want ≈ %v (±%v)", name, got, want, tol)
	}
}

// exactly fails unless got == want.
func exactly(t *testing.T, name string, got, want float64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want exactly %v", name, got, want)
	}
}

func mustInterval(t *testing.T, k int, i time.Duration) Schedule {
	t.Helper()
	s, err := FixedInterval(k, i)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOutageIssueExamples(t *testing.T) {
	backoff, err := Backoff(5, 30000, 240000)
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 240 * time.Second}; !reflect.DeepEqual(backoff.Delays, want) {
		t.Fatalf("backoff delays %v, want %v", backoff.Delays, want)
	}
	tests := []struct {
		name                    string
		s                       Schedule
		span, dead, circulating float64
		extra                   *float64
	}{
		{"k=5 i=60s", mustInterval(t, 5, time.Minute), 240, 720000, 480000, ptr(8000.0)},
		{"k=5 backoff 30s..240s", backoff, 450, 300000, 900000, nil},
		{"k=20 i=60s", mustInterval(t, 20, time.Minute), 1140, 0, 1200000, ptr(20000.0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Outage(OutageParams{Rate: 2000, Outage: 600 * time.Second, Schedule: tc.s})
			if err != nil {
				t.Fatal(err)
			}
			exactly(t, "retry_span_s", r.RetrySpanS, tc.span)
			exactly(t, "dead_lettered", r.DeadLettered, tc.dead)
			exactly(t, "circulating_at_end", r.CirculatingAtEnd, tc.circulating)
			switch {
			case tc.extra == nil && r.ExtraReceivesPerS != nil:
				t.Errorf("extra_receives_per_s = %v, want none for a non-fixed schedule", *r.ExtraReceivesPerS)
			case tc.extra != nil && r.ExtraReceivesPerS == nil:
				t.Errorf("extra_receives_per_s missing, want %v", *tc.extra)
			case tc.extra != nil:
				exactly(t, "extra_receives_per_s", *r.ExtraReceivesPerS, *tc.extra)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestOutageExplicitDelaysMatchSeed(t *testing.T) {
	// "30, 60, 120 and 240 seconds" given as an explicit list.
	s, err := ExplicitDelays([]time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Outage(OutageParams{Rate: 2000, Outage: 10 * time.Minute, Schedule: s})
	if err != nil {
		t.Fatal(err)
	}
	if r.Attempts != 5 {
		t.Errorf("attempts = %d, want len(delays)+1 = 5", r.Attempts)
	}
	exactly(t, "retry_span_s", r.RetrySpanS, 450)
	exactly(t, "dead_lettered", r.DeadLettered, 300000)
}

func TestIndependentIssueExamples(t *testing.T) {
	r3, err := Independent(IndependentParams{Rate: 2000, FailureProb: 0.01, Attempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	exactly(t, "daily_volume", r3.DailyVolume, 172_800_000)
	exactly(t, "dead_lettered_per_day (k=3)", r3.DeadLetteredPerDay, 172.8)
	r5, err := Independent(IndependentParams{Rate: 2000, FailureProb: 0.01, Attempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	approx(t, "dead_lettered_per_day (k=5)", r5.DeadLetteredPerDay, 0.0173, 0.00005)
	exactly(t, "dead_lettered_per_day (k=5), exact value", r5.DeadLetteredPerDay, 0.01728)
	if r5.DaysBetweenDeadLetters == nil {
		t.Fatal("days_between_dead_letters missing")
	}
	approx(t, "days_between_dead_letters", *r5.DaysBetweenDeadLetters, 57.87, 0.01)
	r0, _ := Independent(IndependentParams{Rate: 2000, FailureProb: 0, Attempts: 1})
	if r0.DaysBetweenDeadLetters != nil || r0.DeadLetteredPerDay != 0 {
		t.Errorf("p=0: %+v, want 0 a day and no days_between_dead_letters", r0)
	}
}

func TestPoisonIssueExample(t *testing.T) {
	r, err := Poison(PoisonParams{Rate: 2000, PoisonFraction: 1e-5, CrashAfter: 2 * time.Second,
		Redelivery: 60 * time.Second, Attempts: 5, HandlerTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	exactly(t, "poison_per_day", r.PoisonPerDay, 1728)
	approx(t, "handlers_burnt_after_one_day", r.HandlersBurntAfterOneDay, 57.6, 0.05)
	exactly(t, "handlers_burnt_after_one_day, exact value 1728·2/60", r.HandlersBurntAfterOneDay, 57.6)
	exactly(t, "crashes_per_s_after_one_day", r.CrashesPerSAfterOneDay, 28.8)
	if r.HandlerSecondsPerPoison == nil || r.HealthyConcurrency == nil || r.LimitedConcurrentHandlers == nil {
		t.Fatalf("with --attempts and --handler-time every field must be set: %+v", r)
	}
	exactly(t, "handler_seconds_per_poison", *r.HandlerSecondsPerPoison, 10)
	exactly(t, "limited_concurrent_handlers", *r.LimitedConcurrentHandlers, 0.2)
	exactly(t, "healthy_concurrency", *r.HealthyConcurrency, 100)

	bare, err := Poison(PoisonParams{Rate: 2000, PoisonFraction: 1e-5, CrashAfter: 2 * time.Second, Redelivery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if bare.HandlerSecondsPerPoison != nil || bare.HealthyConcurrency != nil {
		t.Errorf("without --attempts/--handler-time those fields must be absent: %+v", bare)
	}
}

func TestPartitionIssueExample(t *testing.T) {
	s, err := ExplicitDelays([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Partition(PartitionParams{Schedule: s, HandlerTime: 50 * time.Millisecond,
		PartitionRate: 20, PoisonPerDay: 1728, Partitions: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Attempts != 6 {
		t.Errorf("attempts = %d, want 6 (five delays)", r.Attempts)
	}
	b := r.Blocking
	approx(t, "blocking stall_per_poison_s", b.StallPerPoisonS, 31.3, 0.05)
	exactly(t, "blocking stall_per_poison_s, exact 31 + 6·0.05", b.StallPerPoisonS, 31.3)
	approx(t, "blocking backlog_records", b.BacklogRecords, 626, 0.5)
	approx(t, "stalls_per_partition_per_day", b.StallsPerPartitionPerDay, 17.3, 0.05)
	exactly(t, "stalls_per_partition_per_day, exact 1728/100", b.StallsPerPartitionPerDay, 17.28)
	approx(t, "blocking lost minutes per partition per day", b.LostPerPartitionPerDayS/60, 9, 0.05)
	exactly(t, "blocking lost_per_partition_per_day_s, exact 17.28·31.3", b.LostPerPartitionPerDayS, 540.864)

	n := r.NonBlocking
	exactly(t, "non-blocking stall_per_poison_s (one handler run)", n.StallPerPoisonS, 0.05)
	exactly(t, "non-blocking backlog_records", n.BacklogRecords, 1)
	exactly(t, "non-blocking stalls_per_partition_per_day", n.StallsPerPartitionPerDay, 17.28)
	exactly(t, "non-blocking lost_per_partition_per_day_s", n.LostPerPartitionPerDayS, 0.864)

	withProduce, _ := Partition(PartitionParams{Schedule: s, HandlerTime: 50 * time.Millisecond,
		ProduceTime: 10 * time.Millisecond, PartitionRate: 20, PoisonPerDay: 1728, Partitions: 100})
	exactly(t, "non-blocking stall with a 10ms produce", withProduce.NonBlocking.StallPerPoisonS, 0.06)
	exactly(t, "blocking stall ignores the produce time", withProduce.Blocking.StallPerPoisonS, 31.3)
}

func TestBackoffUsesRetryPolicy(t *testing.T) {
	// docs/design.md §5: B=1000, M=60000, retry_attempts 3 → 1, 2, 4 s.
	s, err := Backoff(4, 1000, 60000)
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !reflect.DeepEqual(s.Delays, want) {
		t.Errorf("delays %v, want %v", s.Delays, want)
	}
	if s.Span() != 7*time.Second {
		t.Errorf("span %v, want 7s", s.Span())
	}
	// The cap: 8 attempts from 1 s capped at 10 s → 1,2,4,8,10,10,10.
	s, _ = Backoff(8, 1000, 10000)
	if s.Span() != 45*time.Second {
		t.Errorf("capped span %v, want 45s", s.Span())
	}
	// One attempt: no retry, no span.
	s, _ = Backoff(1, 1000, 60000)
	if len(s.Delays) != 0 || s.Span() != 0 {
		t.Errorf("one attempt: %+v", s)
	}
}

func TestInputErrorsNameTheField(t *testing.T) {
	ok := mustInterval(t, 5, time.Minute)
	tests := []struct {
		field string
		err   error
	}{
		{"rate", second(Outage(OutageParams{Rate: -1, Outage: time.Minute, Schedule: ok}))},
		{"rate", second(Outage(OutageParams{Rate: math.NaN(), Outage: time.Minute, Schedule: ok}))},
		{"rate", second(Outage(OutageParams{Rate: math.Inf(1), Outage: time.Minute, Schedule: ok}))},
		{"outage", second(Outage(OutageParams{Rate: 1, Outage: -time.Minute, Schedule: ok}))},
		{"failure-prob", second(Independent(IndependentParams{Rate: 1, FailureProb: 1.5, Attempts: 3}))},
		{"failure-prob", second(Independent(IndependentParams{Rate: 1, FailureProb: -0.1, Attempts: 3}))},
		{"attempts", second(Independent(IndependentParams{Rate: 1, FailureProb: 0.1, Attempts: 0}))},
		{"poison-fraction", second(Poison(PoisonParams{Rate: 1, PoisonFraction: 2, Redelivery: time.Minute}))},
		{"redelivery", second(Poison(PoisonParams{Rate: 1, PoisonFraction: 0.1}))},
		{"crash-after", second(Poison(PoisonParams{Rate: 1, CrashAfter: -1, Redelivery: time.Minute}))},
		{"attempts", second(Poison(PoisonParams{Rate: 1, Redelivery: time.Minute, Attempts: -3}))},
		{"partitions", second(Partition(PartitionParams{Schedule: ok}))},
		{"partition-rate", second(Partition(PartitionParams{Schedule: ok, Partitions: 1, PartitionRate: -2}))},
		{"poison-per-day", second(Partition(PartitionParams{Schedule: ok, Partitions: 1, PoisonPerDay: -2}))},
		{"handler-time", second(Partition(PartitionParams{Schedule: ok, Partitions: 1, HandlerTime: -1}))},
		{"interval", second(FixedInterval(5, 0))},
		{"attempts", second(FixedInterval(0, time.Second))},
		{"attempts", second(Backoff(102, 1000, 60000))},
		{"backoff-millis", second(Backoff(3, 0, 60000))},
		{"max-backoff-millis", second(Backoff(3, 1000, 999))},
		{"delays", second(ExplicitDelays([]time.Duration{time.Second, -time.Second}))},
		{"distribution", second(ParseDistribution(""))},
		{"distribution", second(ParseDistribution(" , "))},
		{"distribution", second(ParseDistribution("1:0"))},
		{"distribution", second(ParseDistribution("1-9"))},
		{"distribution", second(ParseDistribution("0:9"))},
		{"distribution", second(ParseDistribution("sometimes:9"))},
		{"distribution", second(ParseDistribution("1:-9"))},
		{"attempts-log", second(ReadAttemptsLog(strings.NewReader("1\n2\nthree\n")))},
		{"attempts-log", second(ReadAttemptsLog(strings.NewReader("# nothing\n\n")))},
		{"thresholds", second(Thresholds(Distribution{{Attempts: 1, Count: 1}}, nil))},
		{"thresholds", second(Thresholds(Distribution{{Attempts: 1, Count: 1}}, []int{0}))},
	}
	for i, tc := range tests {
		var ie *InputError
		if !errors.As(tc.err, &ie) {
			t.Errorf("case %d (%s): error %v is not an *InputError", i, tc.field, tc.err)
			continue
		}
		if ie.Field != tc.field {
			t.Errorf("case %d: field %q, want %q (%v)", i, ie.Field, tc.field, ie)
		}
	}
	if err := second(ReadAttemptsLog(strings.NewReader("1\n2\nthree\n"))); !strings.Contains(err.Error(), "line 3") {
		t.Errorf("attempts-log error %q does not name line 3", err)
	}
}

// second returns the error of a two-value call.
func second[T any](_ T, err error) error { return err }

func TestJSONFieldNames(t *testing.T) {
	o, _ := Outage(OutageParams{Rate: 2000, Outage: 600 * time.Second, Schedule: mustInterval(t, 5, time.Minute)})
	i, _ := Independent(IndependentParams{Rate: 2000, FailureProb: 0.01, Attempts: 3})
	p, _ := Poison(PoisonParams{Rate: 2000, PoisonFraction: 1e-5, CrashAfter: 2 * time.Second,
		Redelivery: time.Minute, Attempts: 5, HandlerTime: 50 * time.Millisecond})
	pa, _ := Partition(PartitionParams{Schedule: mustInterval(t, 2, time.Second), Partitions: 1})
	d, _ := ParseDistribution("1:9,3:5,5:4,never:2")
	th, _ := Thresholds(d, []int{1, 5})
	for _, tc := range []struct {
		v    any
		want []string
	}{
		{o, []string{"retry_span_s", "dead_lettered", "circulating_at_end", "extra_receives_per_s", "attempts", "delays_s", "rate_per_s", "outage_s"}},
		{i, []string{"daily_volume", "dead_lettered_per_day", "dead_letter_probability", "days_between_dead_letters", "attempts", "failure_prob"}},
		{p, []string{"poison_per_day", "handlers_burnt_after_one_day", "handler_seconds_per_poison", "healthy_concurrency", "limited_concurrent_handlers", "crashes_per_s_after_one_day"}},
		{pa, []string{"blocking", "non_blocking", "attempts", "delays_s"}},
		{pa.Blocking, []string{"stall_per_poison_s", "backlog_records", "stalls_per_partition_per_day", "lost_per_partition_per_day_s"}},
		{th, []string{"thresholds", "recommended_threshold", "recommended_retry_attempts", "minimum_safe_threshold", "messages", "permanently_failing"}},
		{th.Rows[0], []string{"threshold", "processed", "wasted_attempts", "wrongly_isolated", "permanently_failing_isolated"}},
	} {
		raw, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range tc.want {
			if _, ok := m[k]; !ok {
				t.Errorf("%T JSON lacks %q: %s", tc.v, k, raw)
			}
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{
		720000: "720,000", 1.2e6: "1,200,000", 0: "0", 172.8: "172.8", 0.01728: "0.01728",
		31.3: "31.3", 540.864: "540.86", 57.6: "57.6", 1728: "1,728", -1234.5: "-1,234.5", 1e-12: "1e-12",
	} {
		if got := FormatNumber(v); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", v, got, want)
		}
	}
	if got := FormatSeconds(1140); got != "1,140 s (19 min)" {
		t.Errorf("FormatSeconds(1140) = %q", got)
	}
}
