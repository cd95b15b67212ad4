package cli

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/plan"
)

func newPlanOutageCmd() *cobra.Command {
	var (
		sf     planScheduleFlags
		o      planOutput
		rate   float64
		outage time.Duration
	)
	cmd := &cobra.Command{
		Use:   "outage",
		Short: "Healthy messages dead-lettered by a dependency outage longer than the retry span",
		Long: `Every message whose first attempt and whole retry span fall inside an outage
is dead-lettered. With rate λ, outage O and retry span S (the sum of the delays):

  dead_lettered        = λ · max(0, O − S)
  circulating_at_end   = λ · min(O, S)       messages still waiting for a retry
  extra_receives_per_s = λ · min(O, S) / i   with a fixed interval i

The chart (--chart FILE.svg) plots dead-lettered messages against the retry
span, from 0 to beyond the outage, and marks your schedule.`,
		Example: `  lily plan outage --rate 2000 --outage 600s --attempts 5 --interval 60s
  lily plan outage --rate 2000 --outage 10m --attempts 5 --backoff-millis 30000 --max-backoff-millis 240000 --chart outage.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := planRequire(cmd, "rate", "outage"); err != nil {
				return err
			}
			if err := o.check("outage"); err != nil {
				return err
			}
			s, err := sf.schedule(cmd)
			if err != nil {
				return err
			}
			r, err := plan.Outage(plan.OutageParams{Rate: rate, Outage: outage, Schedule: s})
			if err != nil {
				return planUsage("outage", err)
			}
			return o.emit(cmd, r, func(b *bytes.Buffer) { printOutage(b, s, r) }, r.Chart)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&rate, "rate", 0, "arrival rate, messages per second (>= 0)")
	planDurationFlag(f, &outage, "outage", "how long the dependency fails every attempt, e.g. 10m")
	sf.add(f)
	o.add(f)
	return cmd
}

func printOutage(b *bytes.Buffer, s plan.Schedule, r plan.OutageResult) {
	fmt.Fprintf(b, "Outage of %s at %s messages/s; %s\n\n", planSecs(r.OutageS), planNum(r.RatePerS), planScheduleText(s, r.DelaysS))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	spanHow := "S = sum of the delays"
	if s.Kind == plan.KindInterval {
		spanHow = fmt.Sprintf("S = (%d − 1) × %s", r.Attempts, planNum(s.Interval.Seconds())+" s")
	}
	fmt.Fprintf(tw, "retry span\t%s\t%s\n", planSecs(r.RetrySpanS), spanHow)
	fmt.Fprintf(tw, "dead-lettered\t%s\tλ · max(0, O − S) = %s/s × %s s\n", planNum(r.DeadLettered),
		planNum(r.RatePerS), planNum(math.Max(0, r.OutageS-r.RetrySpanS)))
	fmt.Fprintf(tw, "circulating at end\t%s\tλ · min(O, S) = %s/s × %s s\n", planNum(r.CirculatingAtEnd),
		planNum(r.RatePerS), planNum(math.Min(r.OutageS, r.RetrySpanS)))
	if r.ExtraReceivesPerS != nil {
		fmt.Fprintf(tw, "extra receives\t%s /s\tcirculating / %s s interval\n", planNum(*r.ExtraReceivesPerS), planNum(s.Interval.Seconds()))
	}
	_ = tw.Flush()
	b.WriteString("\n")
	if r.DeadLettered > 0 {
		fmt.Fprintf(b, "Every message that arrives in the first %s of the outage fails all %d attempts and is\n"+
			"dead-lettered. Make the retry span longer than the outage, or pause consumption while the dependency\n"+
			"is down (a circuit breaker), so that an outage becomes lag, not dead letters.\n",
			planSecs(r.OutageS-r.RetrySpanS), r.Attempts)
	} else {
		b.WriteString("The retry span covers the outage: nothing is dead-lettered, but every circulating message keeps\n" +
			"spending attempts, and each poison message gets the same number of attempts.\n")
	}
}

func newPlanIndependentCmd() *cobra.Command {
	var (
		o    planOutput
		p    plan.IndependentParams
		rate float64
	)
	cmd := &cobra.Command{
		Use:   "independent",
		Short: "Healthy messages dead-lettered when every attempt fails independently",
		Long: `When each attempt fails independently with probability p, a healthy message is
dead-lettered only if all k attempts fail:

  daily_volume          = rate · 86,400
  dead_lettered_per_day = daily_volume · p^k

The chart plots dead-lettered messages per day against k on a log scale.`,
		Example: `  lily plan independent --rate 2000 --failure-prob 0.01 --attempts 3`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := planRequire(cmd, "rate", "failure-prob", "attempts"); err != nil {
				return err
			}
			if err := o.check("independent"); err != nil {
				return err
			}
			p.Rate = rate
			r, err := plan.Independent(p)
			if err != nil {
				return planUsage("independent", err)
			}
			return o.emit(cmd, r, func(b *bytes.Buffer) { printIndependent(b, r) }, r.Chart)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&rate, "rate", 0, "arrival rate, messages per second (>= 0)")
	f.Float64Var(&p.FailureProb, "failure-prob", 0, "probability that one attempt fails, 0..1")
	f.IntVar(&p.Attempts, "attempts", 0, "total attempts k (first processing + retries)")
	o.add(f)
	return cmd
}

func printIndependent(b *bytes.Buffer, r plan.IndependentResult) {
	fmt.Fprintf(b, "Independent failures at %s messages/s, p = %s per attempt, %d attempts\n\n",
		planNum(r.RatePerS), planProb(r.FailureProb), r.Attempts)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "daily volume\t%s\trate × 86,400 s\n", planNum(r.DailyVolume))
	fmt.Fprintf(tw, "dead-letter probability\t%s\tp^k = %s^%d\n", planProb(r.DeadLetterProbability), planProb(r.FailureProb), r.Attempts)
	fmt.Fprintf(tw, "dead-lettered per day\t%s\tdaily volume × p^k\n", planNum(r.DeadLetteredPerDay))
	if r.DaysBetweenDeadLetters != nil {
		d := *r.DaysBetweenDeadLetters
		if d >= 1 {
			fmt.Fprintf(tw, "one healthy message every\t%s days\t\n", planNum(d))
		} else {
			fmt.Fprintf(tw, "one healthy message every\t%s\t\n", planSecs(d*86400))
		}
	}
	_ = tw.Flush()
}

// planProb formats a probability in its shortest form.
func planProb(v float64) string { return fmt.Sprint(v) }

func newPlanPoisonCmd() *cobra.Command {
	var (
		o    planOutput
		p    plan.PoisonParams
		rate float64
	)
	cmd := &cobra.Command{
		Use:   "poison",
		Short: "What poison messages cost with and without a limit on attempts",
		Long: `Poison messages fail every attempt, each attempt holding a handler for
--crash-after before it fails or crashes, and come back every --redelivery.
With N = rate · fraction · 86,400 poison messages a day:

  handlers_burnt_after_one_day = N · crash_after / redelivery   (no limit; grows by as much every day)
  handler_seconds_per_poison   = attempts · crash_after          (with --attempts)
  healthy_concurrency          = rate · handler_time             (Little's law, with --handler-time)

The chart plots the handlers poison keeps busy against days.`,
		Example: `  lily plan poison --rate 2000 --poison-fraction 1e-5 --crash-after 2s --redelivery 60s --attempts 5 --handler-time 50ms`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := planRequire(cmd, "rate", "poison-fraction", "crash-after", "redelivery"); err != nil {
				return err
			}
			if err := o.check("poison"); err != nil {
				return err
			}
			p.Rate = rate
			if cmd.Flags().Changed("attempts") && p.Attempts == 0 {
				return usagef("plan poison: --attempts 0: must be >= 1 (total attempts); leave it out for no limit")
			}
			r, err := plan.Poison(p)
			if err != nil {
				return planUsage("poison", err)
			}
			return o.emit(cmd, r, func(b *bytes.Buffer) { printPoison(b, r) }, r.Chart)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&rate, "rate", 0, "arrival rate of all messages per second (>= 0)")
	f.Float64Var(&p.PoisonFraction, "poison-fraction", 0, "share of messages that are poison, 0..1 (1e-5 = one in 100,000)")
	planDurationFlag(f, &p.CrashAfter, "crash-after", "how long one attempt of a poison message holds a handler, e.g. 2s")
	planDurationFlag(f, &p.Redelivery, "redelivery", "how long until a failed poison message is delivered again (lease / visibility timeout), e.g. 60s")
	f.IntVar(&p.Attempts, "attempts", 0, "limit in total attempts before a poison message is dead-lettered (optional)")
	planDurationFlag(f, &p.HandlerTime, "handler-time", "handler time of a healthy message, e.g. 50ms (optional)")
	o.add(f)
	return cmd
}

func printPoison(b *bytes.Buffer, r plan.PoisonResult) {
	fmt.Fprintf(b, "Poison at %s messages/s, fraction %s, %s per attempt, redelivered every %s\n\n",
		planNum(r.RatePerS), planProb(r.PoisonFraction), planSecs(r.CrashAfterS), planSecs(r.RedeliveryS))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "poison per day\t%s\trate × fraction × 86,400 s\n", planNum(r.PoisonPerDay))
	fmt.Fprintf(tw, "without a limit, after one day:\t\t\n")
	fmt.Fprintf(tw, "  concurrent handlers burnt\t%s\tpoison per day × %s s / %s s; grows by as much every day\n",
		planNum(r.HandlersBurntAfterOneDay), planNum(r.CrashAfterS), planNum(r.RedeliveryS))
	fmt.Fprintf(tw, "  poison deliveries\t%s /s\tpoison per day / %s s; each may kill a process\n",
		planNum(r.CrashesPerSAfterOneDay), planNum(r.RedeliveryS))
	if r.HandlerSecondsPerPoison != nil {
		fmt.Fprintf(tw, "with a limit of %d attempts:\t\t\n", r.Attempts)
		fmt.Fprintf(tw, "  handler-seconds per poison\t%s\t%d × %s s\n", planNum(*r.HandlerSecondsPerPoison), r.Attempts, planNum(r.CrashAfterS))
		fmt.Fprintf(tw, "  handlers busy with poison\t%s\tpoison per second × handler-seconds; constant\n", planNum(*r.LimitedConcurrentHandlers))
	}
	if r.HealthyConcurrency != nil {
		fmt.Fprintf(tw, "healthy concurrency\t%s\tLittle's law: rate × %s s\n", planNum(*r.HealthyConcurrency), planNum(r.HandlerTimeS))
	}
	_ = tw.Flush()
	if r.HealthyConcurrency != nil && *r.HealthyConcurrency > 0 {
		fmt.Fprintf(b, "\nWithout a limit, poison needs %s%% of the healthy load's handlers after one day, and as much more every day.\n",
			planNum(math.Round(1000*r.HandlersBurntAfterOneDay / *r.HealthyConcurrency)/10))
	}
}

func newPlanPartitionCmd() *cobra.Command {
	var (
		sf planScheduleFlags
		o  planOutput
		p  plan.PartitionParams
	)
	cmd := &cobra.Command{
		Use:   "partition",
		Short: "How long a poison record stalls a partition of a log, blocking vs non-blocking retries",
		Long: `On a partitioned log a consumer cannot commit past a record it still retries,
so blocking retries hold the whole partition:

  stall (blocking)      = sum of the delays + attempts · handler_time
  stall (non-blocking)  = handler_time + produce_time   (retry topics)
  backlog               = partition_rate · stall
  stalls per day        = poison_per_day / partitions
  lost per day          = stalls per day · stall

The chart plots the minutes a partition loses a day against the number of
blocking retries.`,
		Example: `  lily plan partition --delays 1s,2s,4s,8s,16s --handler-time 50ms --partition-rate 20 --poison-per-day 1728 --partitions 100`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := planRequire(cmd, "handler-time", "partition-rate", "poison-per-day", "partitions"); err != nil {
				return err
			}
			if err := o.check("partition"); err != nil {
				return err
			}
			s, err := sf.schedule(cmd)
			if err != nil {
				return err
			}
			p.Schedule = s
			r, err := plan.Partition(p)
			if err != nil {
				return planUsage("partition", err)
			}
			return o.emit(cmd, r, func(b *bytes.Buffer) { printPartition(b, s, r) }, r.Chart)
		},
	}
	f := cmd.Flags()
	sf.add(f)
	planDurationFlag(f, &p.HandlerTime, "handler-time", "how long one attempt holds the consumer, e.g. 50ms")
	planDurationFlag(f, &p.ProduceTime, "produce-time", "copying a record to a retry topic (acks=all), for non-blocking retries (default 0s)")
	f.Float64Var(&p.PartitionRate, "partition-rate", 0, "records per second arriving on one partition")
	f.Float64Var(&p.PoisonPerDay, "poison-per-day", 0, "poison records a day on the whole topic")
	f.IntVar(&p.Partitions, "partitions", 0, "partitions the poison spreads over (>= 1)")
	o.add(f)
	return cmd
}

func printPartition(b *bytes.Buffer, s plan.Schedule, r plan.PartitionResult) {
	fmt.Fprintf(b, "Poison records on a log: %s, %s per handler run;\n%s records/s per partition, %s poison records a day over %d partitions\n\n",
		planScheduleText(s, r.DelaysS), planSecs(r.HandlerTimeS), planNum(r.PartitionRate), planNum(r.PoisonPerDay), r.Partitions)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	bl, nb := r.Blocking, r.NonBlocking
	fmt.Fprintf(tw, "\tblocking retries\tnon-blocking retry topics\n")
	fmt.Fprintf(tw, "stall per poison record\t%s\t%s\n", planSecs(bl.StallPerPoisonS), planSecs(nb.StallPerPoisonS))
	fmt.Fprintf(tw, "records backed up behind it\t%s\t%s\n", planNum(bl.BacklogRecords), planNum(nb.BacklogRecords))
	fmt.Fprintf(tw, "stalls per partition per day\t%s\t%s\n", planNum(bl.StallsPerPartitionPerDay), planNum(nb.StallsPerPartitionPerDay))
	fmt.Fprintf(tw, "processing lost per partition per day\t%s\t%s\n", planSecs(bl.LostPerPartitionPerDayS), planSecs(nb.LostPerPartitionPerDayS))
	_ = tw.Flush()
	fmt.Fprintf(b, "\nblocking: stall = sum of the delays + %d attempts × %s s handler time\n"+
		"non-blocking: stall = one handler run + one produce (--produce-time %s s); the record's key loses its order\n",
		r.Attempts, planNum(r.HandlerTimeS), planNum(r.ProduceTimeS))
}

func newPlanThresholdCmd() *cobra.Command {
	var (
		o          planOutput
		dist, log  string
		thresholds []int
	)
	cmd := &cobra.Command{
		Use:   "threshold",
		Short: "Sweep attempt thresholds over a distribution of attempts needed",
		Long: `Given how many attempts messages actually need to succeed ("never" for
permanent failures), show for each threshold (total attempts before a message
is isolated in the dead-letter queue): processed messages, wasted attempts,
messages wrongly isolated (they would have succeeded later) and permanently
failing messages isolated; then recommend the smallest threshold that isolates
no message that would have succeeded.

The distribution is --distribution needed:count,... (e.g. 1:9,3:5,5:4,never:2)
or --attempts-log FILE with one observed "attempts needed" per line ("never"
for a permanent failure; blank lines and # comments are skipped). Without
--thresholds every threshold from 1 to one above the largest need is swept.`,
		Example: `  lily plan threshold --distribution 1:9,3:5,5:4,never:2 --thresholds 1,2,3,5,8
  lily plan threshold --attempts-log attempts.txt --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check("threshold"); err != nil {
				return err
			}
			f := cmd.Flags()
			var (
				d   plan.Distribution
				err error
			)
			switch {
			case f.Changed("distribution") && f.Changed("attempts-log"):
				return usagef("plan threshold: --distribution and --attempts-log are exclusive; give one")
			case f.Changed("distribution"):
				d, err = plan.ParseDistribution(dist)
			case f.Changed("attempts-log"):
				d, err = readAttemptsLog(log)
			default:
				return usagef("plan threshold: give --distribution needed:count,... (e.g. 1:9,3:5,5:4,never:2) or --attempts-log FILE")
			}
			if err != nil {
				return planUsage("threshold", err)
			}
			if !f.Changed("thresholds") {
				thresholds = plan.DefaultThresholds(d)
			}
			r, err := plan.Thresholds(d, thresholds)
			if err != nil {
				return planUsage("threshold", err)
			}
			return o.emit(cmd, r, func(b *bytes.Buffer) { printThresholds(b, r) }, r.Chart)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dist, "distribution", "", `attempts needed and how many messages need them, e.g. "1:9,3:5,5:4,never:2"`)
	f.StringVar(&log, "attempts-log", "", `file with one observed "attempts needed" per line ("never" for permanent failures)`)
	f.IntSliceVar(&thresholds, "thresholds", nil, "thresholds (total attempts) to compare, e.g. 1,2,3,5,8")
	o.add(f)
	return cmd
}

// readAttemptsLog reads --attempts-log; a file that cannot be opened is a
// usage error naming the flag.
func readAttemptsLog(path string) (plan.Distribution, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, usagef("plan threshold: --attempts-log %q: %v", path, err)
	}
	defer fh.Close()
	return plan.ReadAttemptsLog(fh)
}

func printThresholds(b *bytes.Buffer, r plan.ThresholdResult) {
	fmt.Fprintf(b, "%d messages: ", r.Messages)
	for i, n := range r.Distribution {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 8 && len(r.Distribution) > 9 {
			fmt.Fprintf(b, "... (%d more classes)", len(r.Distribution)-8)
			break
		}
		if n.Attempts == plan.Never {
			fmt.Fprintf(b, "%d never succeed", n.Count)
		} else {
			fmt.Fprintf(b, "%d succeed at attempt %d", n.Count, n.Attempts)
		}
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "threshold\tprocessed\twasted attempts\twrongly isolated\tpermanently failing isolated\t\n")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t\n", row.Threshold, row.Processed, row.WastedAttempts,
			row.WronglyIsolated, row.PermanentlyFailingIsolated)
	}
	_ = tw.Flush()
	if r.RecommendedListed {
		fmt.Fprintf(b, "\nrecommended: threshold %d (Lily retry_attempts = %d), the smallest listed threshold that isolates\n"+
			"no message that would have succeeded.\n", r.RecommendedThreshold, r.RecommendedRetryAttempts)
	} else {
		fmt.Fprintf(b, "\nrecommended: threshold %d (Lily retry_attempts = %d); none of the listed thresholds avoids isolating\n"+
			"messages that would have succeeded.\n", r.RecommendedThreshold, r.RecommendedRetryAttempts)
	}
	if r.MinimumSafeThreshold < r.RecommendedThreshold {
		fmt.Fprintf(b, "A threshold of %d would already be enough: the most attempts any message needed.\n", r.MinimumSafeThreshold)
	}
}
