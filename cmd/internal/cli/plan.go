package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/plan"
	"github.com/lily-mq/lily/retry"
)

func init() { register(newPlanCmd) }

func newPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan retry limits: outage, independent failures, poison cost, partition stalls, thresholds, JetStream",
		Long: `Work out what a retry policy costs before an incident does (docs/design.md §10).

"Attempts" always means total attempts: the first processing plus the retries
(a Lily queue with retry_attempts A makes A+1 attempts). Retry delays are given
one of three ways:

  --attempts K --interval D                          K attempts a fixed D apart
  --attempts K --backoff-millis B [--max-backoff-millis M]
                                                     Lily's schedule: delays min(B·2^(n−1), M) ms, n = 1..K−1
  --delays d1,d2,...                                 explicit delays; K = len+1
  --delays-millis d1,d2,... [--attempts K]           Lily's retry_delays_millis chain: retry n waits d_n ms,
                                                     the last repeating; K defaults to len+1

Durations use Go syntax: 60s, 50ms, 10m, 2h. Every mode prints a table, or JSON
with --json, and can draw an SVG chart with --chart FILE.svg.`,
		Example: `  lily plan outage --rate 2000 --outage 10m --attempts 5 --interval 60s
  lily plan independent --rate 2000 --failure-prob 0.01 --attempts 5
  lily plan poison --rate 2000 --poison-fraction 1e-5 --crash-after 2s --redelivery 60s --attempts 5 --handler-time 50ms
  lily plan partition --delays 1s,2s,4s,8s,16s --handler-time 50ms --partition-rate 20 --poison-per-day 1728 --partitions 100
  lily plan threshold --distribution 1:9,3:5,5:4,never:2 --thresholds 1,2,3,5,8
  lily plan jetstream --max-deliver 5 --backoff 1s,5s,30s --handler-time 50ms`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("plan: unknown mode %q; use outage, independent, poison, partition, threshold or jetstream (see 'lily plan --help')", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		name := "plan " + c.Name()
		if c == cmd {
			name = "plan"
		}
		return &UsageError{Msg: fmt.Sprintf("%s: %v (see 'lily %s --help')", name, err, name)}
	})
	cmd.AddCommand(newPlanOutageCmd(), newPlanIndependentCmd(), newPlanPoisonCmd(),
		newPlanPartitionCmd(), newPlanThresholdCmd(), newPlanJetStreamCmd())
	return cmd
}

// planDurationValue is a pflag.Value for a Go duration with an error message
// that says which syntax is expected.
type planDurationValue struct{ d *time.Duration }

func (v planDurationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0s"
	}
	return v.d.String()
}

func (v planDurationValue) Set(s string) error {
	d, err := planParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (planDurationValue) Type() string { return "duration" }

// planParseDuration parses a Go duration, explaining the syntax on error.
func planParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "time: ")
		return 0, fmt.Errorf("%s; use Go duration syntax with a unit (ns, us, ms, s, m, h), e.g. 600s, 10m, 50ms", msg)
	}
	return d, nil
}

// planDurationListValue is a pflag.Value for a comma-separated list of Go
// durations.
type planDurationListValue struct{ ds *[]time.Duration }

func (v planDurationListValue) String() string {
	if v.ds == nil {
		return ""
	}
	parts := make([]string, len(*v.ds))
	for i, d := range *v.ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (v planDurationListValue) Set(s string) error {
	var out []time.Duration
	for i, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			return fmt.Errorf("delay %d is empty; give delays like 1s,2s,4s", i+1)
		}
		d, err := planParseDuration(item)
		if err != nil {
			return fmt.Errorf("delay %d %q: %w", i+1, strings.TrimSpace(item), err)
		}
		out = append(out, d)
	}
	*v.ds = out
	return nil
}

func (planDurationListValue) Type() string { return "durations" }

// planDurationFlag registers a Go-duration flag.
func planDurationFlag(f *pflag.FlagSet, d *time.Duration, name, usage string) {
	f.Var(planDurationValue{d}, name, usage)
}

// planScheduleFlags are the three ways to give retry delays.
type planScheduleFlags struct {
	attempts          int
	interval          time.Duration
	backoff, maxDelay int64
	delays            []time.Duration
	chain             []int64
}

func (s *planScheduleFlags) add(f *pflag.FlagSet) {
	f.IntVar(&s.attempts, "attempts", 0, "total attempts: the first processing plus the retries (with --interval or --backoff-millis)")
	planDurationFlag(f, &s.interval, "interval", "fixed delay between attempts, e.g. 60s")
	f.Int64Var(&s.backoff, "backoff-millis", retry.DefaultBackoffMillis,
		"Lily's retry_backoff_millis: first delay in ms; delays double up to --max-backoff-millis")
	f.Int64Var(&s.maxDelay, "max-backoff-millis", retry.DefaultMaxBackoffMillis,
		"Lily's max_retry_backoff_millis: cap on every delay in ms")
	f.Var(planDurationListValue{&s.delays}, "delays", "explicit delays between attempts, e.g. 1s,2s,4s,8s,16s (attempts = count + 1)")
	f.Int64SliceVar(&s.chain, "delays-millis", nil,
		"Lily's retry_delays_millis in ms, e.g. 10000,60000,600000: the last delay repeats for a longer --attempts (default: count + 1)")
}

// schedule builds the schedule from whichever way the delays were given,
// reporting a usage error naming the flags otherwise.
func (s *planScheduleFlags) schedule(cmd *cobra.Command) (plan.Schedule, error) {
	f := cmd.Flags()
	var ways []string
	if f.Changed("interval") {
		ways = append(ways, "--interval")
	}
	if f.Changed("backoff-millis") || f.Changed("max-backoff-millis") {
		ways = append(ways, "--backoff-millis/--max-backoff-millis")
	}
	if f.Changed("delays") {
		ways = append(ways, "--delays")
	}
	if f.Changed("delays-millis") {
		ways = append(ways, "--delays-millis")
	}
	name := cmd.Name()
	switch len(ways) {
	case 0:
		return plan.Schedule{}, usagef("plan %s: give the retry delays: --attempts K --interval D, "+
			"--attempts K --backoff-millis B [--max-backoff-millis M], --delays d1,d2,... or --delays-millis d1,d2,...", name)
	case 1:
	default:
		return plan.Schedule{}, usagef("plan %s: %s are exclusive; give the retry delays one way only", name, strings.Join(ways, " and "))
	}
	var (
		sch plan.Schedule
		err error
	)
	switch ways[0] {
	case "--delays-millis":
		attempts := len(s.chain) + 1
		if f.Changed("attempts") {
			attempts = s.attempts
		}
		sch, err = plan.Chain(attempts, s.chain)
	case "--delays":
		sch, err = plan.ExplicitDelays(s.delays)
		if err == nil && f.Changed("attempts") && s.attempts != sch.Attempts {
			return plan.Schedule{}, usagef("plan %s: --attempts %d does not match --delays: %d delay(s) make %d attempts "+
				"(the first processing plus one retry per delay); drop --attempts or fix it",
				name, s.attempts, len(s.delays), sch.Attempts)
		}
	default:
		if !f.Changed("attempts") {
			return plan.Schedule{}, usagef("plan %s: --attempts is required with %s (total attempts, e.g. --attempts 5)", name, ways[0])
		}
		if ways[0] == "--interval" {
			sch, err = plan.FixedInterval(s.attempts, s.interval)
		} else {
			sch, err = plan.Backoff(s.attempts, s.backoff, s.maxDelay)
		}
	}
	if err != nil {
		return plan.Schedule{}, planUsage(name, err)
	}
	return sch, nil
}

// planRequire reports the required flags of cmd that were not given, all
// at once, as a usage error.
func planRequire(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if !cmd.Flags().Changed(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return usagef("plan %s: missing %s (see 'lily plan %s --help')", cmd.Name(), strings.Join(missing, ", "), cmd.Name())
}

// planUsage turns a *plan.InputError into a usage error naming the flag;
// other errors pass through.
func planUsage(mode string, err error) error {
	var ie *plan.InputError
	if errors.As(err, &ie) {
		return usagef("plan %s: --%s %s: %s", mode, ie.Field, ie.Value, ie.Rule)
	}
	return err
}

// planOutput holds the flags every plan mode shares.
type planOutput struct {
	asJSON bool
	chart  string
}

func (o *planOutput) add(f *pflag.FlagSet) {
	jsonFlag(f, &o.asJSON, "print JSON instead of a table")
	f.StringVar(&o.chart, "chart", "", "also draw a chart into this .svg file")
}

// check validates --chart before anything is computed.
func (o *planOutput) check(mode string) error {
	if o.chart == "" {
		return nil
	}
	if ext := strings.ToLower(filepath.Ext(o.chart)); ext != ".svg" {
		return usagef("plan %s: --chart %q: the chart is written as SVG, so the file name must end in .svg "+
			"(PNG is not supported; convert the SVG, e.g. with rsvg-convert)", mode, o.chart)
	}
	return nil
}

// emit prints v as JSON or through table, then writes the chart.
func (o *planOutput) emit(cmd *cobra.Command, v any, table func(*bytes.Buffer), chart func() plan.Chart) error {
	out := cmd.OutOrStdout()
	var b bytes.Buffer
	if o.asJSON {
		if err := report.JSON(&b, v); err != nil {
			return err
		}
	} else {
		var t bytes.Buffer
		table(&t)
		for line := range strings.Lines(t.String()) {
			b.WriteString(strings.TrimRight(line, " \n"))
			b.WriteString("\n")
		}
	}
	if o.chart != "" {
		var svg bytes.Buffer
		if err := chart().WriteSVG(&svg); err != nil {
			return err
		}
		if err := os.WriteFile(o.chart, svg.Bytes(), 0o644); err != nil {
			return fmt.Errorf("plan %s: writing the chart: %w", cmd.Name(), err)
		}
		if !o.asJSON {
			fmt.Fprintf(&b, "\nchart written to %s\n", o.chart)
		}
	}
	_, err := out.Write(b.Bytes())
	return err
}

// planNum is plan.FormatNumber.
func planNum(v float64) string { return plan.FormatNumber(v) }

// planSecs is plan.FormatSeconds.
func planSecs(v float64) string { return plan.FormatSeconds(v) }

// planDelaysText lists delays in seconds, eliding the middle of long lists.
func planDelaysText(ds []float64) string {
	if len(ds) == 0 {
		return "none (a single attempt)"
	}
	parts := make([]string, 0, len(ds))
	for i, d := range ds {
		if len(ds) > 8 && i == 4 {
			parts = append(parts, fmt.Sprintf("... (%d more)", len(ds)-7))
		}
		if len(ds) > 8 && i >= 4 && i < len(ds)-3 {
			continue
		}
		parts = append(parts, planNum(d)+" s")
	}
	return strings.Join(parts, ", ")
}

// planScheduleText describes a schedule in one phrase.
func planScheduleText(s plan.Schedule, delays []float64) string {
	switch s.Kind {
	case plan.KindInterval:
		return fmt.Sprintf("%d attempts a fixed %s apart", s.Attempts, planSecs(s.Interval.Seconds()))
	case plan.KindBackoff:
		return fmt.Sprintf("%d attempts with Lily's exponential backoff (delays %s)", s.Attempts, planDelaysText(delays))
	case plan.KindChain:
		return fmt.Sprintf("%d attempts with Lily's delay chain (delays %s)", s.Attempts, planDelaysText(delays))
	default:
		return fmt.Sprintf("%d attempts (delays %s)", s.Attempts, planDelaysText(delays))
	}
}
