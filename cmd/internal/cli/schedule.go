package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/retry"
)

func init() { register(newScheduleCmd) }

// scheduleFlags maps the TOML names of the retry settings, as the retry
// package reports them, to the flags of 'lily schedule'. The longer name
// comes first so that the replacer never rewrites the tail of
// max_retry_backoff_millis as retry_backoff_millis.
var scheduleFlags = strings.NewReplacer(
	"retry_delays_millis", "--delays-millis",
	"max_retry_backoff_millis", "--max-backoff-millis",
	"retry_backoff_millis", "--backoff-millis",
	"retry_attempts", "--attempts",
	"retry_jitter_ratio", "--jitter",
)

// scheduleJSON is the --json output of 'lily schedule'.
type scheduleJSON struct {
	Retries []retryJSON `json:"retries"`
	Buckets []int64     `json:"buckets_ms"`
}

// retryJSON is one retry of the schedule; Chosen is set only with
// --event-id.
type retryJSON struct {
	N          int     `json:"n"`
	Nominal    int64   `json:"nominal_ms"`
	Candidates []int64 `json:"candidates_ms"`
	Chosen     *int64  `json:"chosen_ms,omitempty"`
}

func newScheduleCmd() *cobra.Command {
	var (
		p       retry.Policy
		eventID string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Show the retry delays and delay buckets of a retry policy",
		Long: `Show the retry schedule of a queue's retry policy (docs/design.md §5): for each
retry n = 1..attempts its nominal delay min(backoff·2^(n−1), max), the jittered
candidate delays, and with --event-id the delay that event takes; then the
queue's delay buckets and the total retry span. Flag defaults are Lily's
defaults (retry_attempts 0, retry_backoff_millis 1000,
max_retry_backoff_millis 60000, retry_jitter_ratio 0.0).

--delays-millis d1,d2,... is the queue's retry_delays_millis instead: retry n
waits d_n, the last delay repeating when --attempts is longer than the chain
(default --attempts: one retry per delay); jittered candidates are clamped to
the chain's smallest and largest delay. It cannot be combined with
--backoff-millis or --max-backoff-millis.`,
		Example: `  lily schedule --attempts 3 --backoff-millis 1000 --max-backoff-millis 60000 --jitter 0.2
  lily schedule --attempts 5 --jitter 0.2 --event-id 0190a5c2-7e1b-7000-8000-000000000042 --json
  lily schedule --delays-millis 10000,60000,600000 --attempts 5 --jitter 0.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("delays-millis") {
				var both []string
				for _, n := range []string{"backoff-millis", "max-backoff-millis"} {
					if cmd.Flags().Changed(n) {
						both = append(both, "--"+n)
					}
				}
				if len(both) > 0 {
					return usagef("schedule: --delays-millis and %s are exclusive: a queue sets retry_delays_millis or "+
						"retry_backoff_millis/max_retry_backoff_millis, not both; drop one", strings.Join(both, " and "))
				}
				p.BackoffMillis, p.MaxBackoffMillis = 0, 0 // the chain replaces them
				if !cmd.Flags().Changed("attempts") {
					p.Attempts = len(p.DelaysMillis)
				}
			}
			if err := checkSchedule(p); err != nil {
				return err
			}
			var id *string
			if cmd.Flags().Changed("event-id") {
				id = &eventID
			}
			s := buildSchedule(p, id)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
			}
			return printSchedule(cmd.OutOrStdout(), p, s, id != nil)
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Attempts, "attempts", retry.DefaultAttempts,
		"retry_attempts: framework retries after the first processing, 0..100")
	f.Int64Var(&p.BackoffMillis, "backoff-millis", retry.DefaultBackoffMillis,
		"retry_backoff_millis: delay of the first retry in ms, > 0")
	f.Int64Var(&p.MaxBackoffMillis, "max-backoff-millis", retry.DefaultMaxBackoffMillis,
		"max_retry_backoff_millis: cap on every delay in ms, >= --backoff-millis")
	f.Int64SliceVar(&p.DelaysMillis, "delays-millis", nil,
		"retry_delays_millis: explicit delay chain in ms, e.g. 10000,60000,600000 (instead of --backoff-millis/--max-backoff-millis)")
	f.Float64Var(&p.JitterRatio, "jitter", retry.DefaultJitterRatio,
		"retry_jitter_ratio: a retry may wait the nominal delay times 1-r, 1 or 1+r; 0.0..0.5")
	f.StringVar(&eventID, "event-id", "", "also show the delay this event ID takes at each retry")
	jsonFlag(f, &asJSON, "print JSON instead of a table")
	return cmd
}

// checkSchedule validates p and its bucket count, reporting every problem
// by flag name as a usage error.
func checkSchedule(p retry.Policy) error {
	if err := p.Validate(); err != nil {
		var lines []string
		var joined interface{ Unwrap() []error }
		if errors.As(err, &joined) {
			for _, e := range joined.Unwrap() {
				lines = append(lines, scheduleFlags.Replace(e.Error()))
			}
		} else {
			lines = append(lines, scheduleFlags.Replace(err.Error()))
		}
		return usagef("schedule: invalid retry parameters:\n  %s", strings.Join(lines, "\n  "))
	}
	if n := len(p.Buckets()); n > retry.MaxBucketsPerQueue {
		return usagef("schedule: these parameters need %d delay buckets, at most %d per queue are allowed; "+
			"%s",
			n, retry.MaxBucketsPerQueue, scheduleBucketFix(p))
	}
	return nil
}

// buildSchedule computes the schedule of p; eventID, when not nil, selects
// the chosen delay of each retry.
func buildSchedule(p retry.Policy, eventID *string) scheduleJSON {
	s := scheduleJSON{Retries: []retryJSON{}, Buckets: p.Buckets()}
	for n := 1; n <= p.Attempts; n++ {
		r := retryJSON{N: n, Nominal: p.Nominal(n), Candidates: p.Candidates(n)}
		if eventID != nil {
			c := p.Choose(*eventID, n)
			r.Chosen = &c
		}
		s.Retries = append(s.Retries, r)
	}
	return s
}

// printSchedule writes s as an aligned table followed by the buckets and
// the retry span.
func printSchedule(w io.Writer, p retry.Policy, s scheduleJSON, chosen bool) error {
	var b strings.Builder
	if len(s.Retries) == 0 {
		b.WriteString("no retries (--attempts 0): a transient error goes straight to the dead-letter destination\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		header := "retry\tnominal\tcandidates"
		if chosen {
			header += "\tchosen"
		}
		fmt.Fprintln(tw, header)
		for _, r := range s.Retries {
			line := fmt.Sprintf("%d\t%s\t%s", r.N, millis(r.Nominal), millisList(r.Candidates))
			if r.Chosen != nil {
				line += "\t" + millis(*r.Chosen)
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	if len(s.Buckets) == 0 {
		b.WriteString("buckets (0): none\n")
	} else {
		fmt.Fprintf(&b, "buckets (%d): %s\n", len(s.Buckets), millisList(s.Buckets))
	}
	span := p.Span()
	fmt.Fprintf(&b, "retry span: %s", millis(span))
	if span > 0 && span <= math.MaxInt64/int64(time.Millisecond) {
		fmt.Fprintf(&b, " (%s)", time.Duration(span)*time.Millisecond)
	}
	b.WriteString(" = sum of the nominal delays\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// millis formats a delay in milliseconds, e.g. "1200ms".
func millis(ms int64) string { return strconv.FormatInt(ms, 10) + "ms" }

// millisList formats delays as "1000ms, 1200ms".
func millisList(ms []int64) string {
	parts := make([]string, len(ms))
	for i, d := range ms {
		parts[i] = millis(d)
	}
	return strings.Join(parts, ", ")
}

// scheduleBucketFix says which flags lower the bucket count of p.
func scheduleBucketFix(p retry.Policy) string {
	if p.Chain() {
		return "use fewer distinct delays in --delays-millis or lower --jitter"
	}
	return "lower --attempts, --jitter or --max-backoff-millis, or raise --backoff-millis"
}
