package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/redrive"
)

func init() {
	registerDLQ(newDLQJobsCmd)
	registerDLQ(newDLQCancelCmd)
	registerDLQ(newDLQResumeCmd)
}

// jobsJSON is the --json output of 'lily dlq jobs'.
type jobsJSON struct {
	Jobs []*redrive.Job `json:"jobs"`
}

func newDLQJobsCmd() *cobra.Command {
	var (
		sf     storeFlags
		queue  string
		active bool
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List the redrive jobs kept in the catalog, newest first",
		Long: `List the redrive jobs kept in the catalog, newest first: every redrive
('lily dlq redrive', the API, the console) is one.

  state     queued, running, sampling (the sample is sent or watched), done,
            stopped (the sample did not prove the fix), failed, cancelled
  sent      confirmed and marked redriven, of total (the plan when the job
            was created); needs_manual: at max_redrives, not sent
  holder    the runner holding a running job, until its lease runs out; a
            job whose runner died is resumed by the next one ('lily serve',
            'lily dlq resume JOB')

--json prints {"jobs": [...]} with every field (id, queue, state, sent,
refused, total, held_back, cursor, actor, created_at, ...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit %d: must be >= 1", limit)
			}
			env, err := openDLQ(cmd.Context(), sf)
			if err != nil {
				return err
			}
			defer env.Close()
			js, err := redrive.New(env.cat).Jobs(cmd.Context(), redrive.JobQuery{Queue: queue, Active: active, Limit: limit})
			if err != nil {
				return err
			}
			if js == nil {
				js = []*redrive.Job{}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(w, jobsJSON{Jobs: js})
			}
			printJobs(w, js)
			return nil
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&queue, "queue", "", "only the jobs of this queue (and those of every queue)")
	fl.BoolVar(&active, "active", false, "only queued, running and sampling jobs")
	fl.IntVar(&limit, "limit", 50, "at most this many jobs")
	jsonFlag(fl, &asJSON, "")
	return cmd
}

func printJobs(w io.Writer, js []*redrive.Job) {
	if len(js) == 0 {
		fmt.Fprintln(w, "no redrive job")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tQUEUE\tSTATE\tSENT\tNEEDS_MANUAL\tTOTAL\tHELD_BACK\tACTOR\tCREATED\tHOLDER\tERROR")
	for _, j := range js {
		holder, state := "", string(j.State)
		switch {
		case j.Orphaned:
			state += " (orphaned)"
			holder = fmt.Sprintf("none: 'lily dlq resume %d'", j.ID)
		case j.State.Active() && j.Holder != "" && j.LeaseUntil != nil:
			holder = fmt.Sprintf("%s (until %s)", j.Holder, j.LeaseUntil.Local().Format(time.TimeOnly))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", j.ID, j.Queue, state, j.Sent, j.Refused, j.Total, j.HeldBack,
			j.Actor, j.CreatedAt.Local().Format(time.DateTime), holder, truncate(j.Error, 80))
	}
	tw.Flush()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func parseJobID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("JOB %q: want a redrive job ID, a number ('lily dlq jobs' lists them)", arg)
	}
	return id, nil
}

func newDLQCancelCmd() *cobra.Command {
	var (
		sf     storeFlags
		actor  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a redrive job: it stops before its next batch",
		Long: `Cancel a queued or running redrive job, wherever it runs: its runner
stops before the next batch. What was confirmed stays redriven; the rest of
the selection stays pending. Audited under the job's operation.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseJobID(args[0])
			if err != nil {
				return err
			}
			env, err := openDLQ(cmd.Context(), sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq cancel")
			if err != nil {
				return err
			}
			defer stopTraces()
			rd := redrive.New(env.cat)
			rd.TracerProvider = env.tp // nil without OTEL_*: no span
			j, err := rd.CancelJob(cmd.Context(), id, actorOr(actor))
			if err != nil {
				return err
			}
			if asJSON {
				return report.JSON(cmd.OutOrStdout(), j)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "redrive job %d cancelled (%d sent, %d marked needs_manual, of %d); its runner stops before the next batch\n",
				j.ID, j.Sent, j.Refused, j.Total)
			return nil
		},
	}
	sf.add(cmd)
	actorFlag(cmd, &actor)
	jsonFlag(cmd.Flags(), &asJSON, "print the cancelled job as JSON")
	return cmd
}

func newDLQResumeCmd() *cobra.Command {
	var (
		sf     storeFlags
		url    string
		kbrk   string
		lease  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "resume JOB",
		Short: "Run a queued or orphaned redrive job here, in the foreground, after its last handled entry",
		Long: `Take a redrive job that no runner holds — queued, or orphaned because its
runner died and its lease ran out — and run it here to its end: the rest of
its sample, the watching of the sample, then the rest of the selection,
each after the job's last handled entry. 'lily serve' does the same for
every such job by itself. A redrive stopped with Ctrl-C in the foreground
(its job cancelled as "interrupted") is taken up again too, unless another
job holds its queue meanwhile. A job still held by a live runner is
refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseJobID(args[0])
			if err != nil {
				return err
			}
			if lease <= 0 {
				return usagef("--job-lease %s: must be > 0", lease)
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq resume")
			if err != nil {
				return err
			}
			defer stopTraces()
			targets := &redriveTargets{env: env, url: url, brokers: kbrk}
			defer targets.Close()
			holder := runnerName("cli")
			rd := redrive.New(env.cat)
			rd.TracerProvider = env.tp // nil without OTEL_*: the job's span and its messages' not made
			j, err := rd.ClaimJobID(ctx, id, holder, lease, time.Now())
			if err != nil {
				return err
			}
			bar := newProgressBar(cmd.ErrOrStderr())
			bar.on = bar.on && !asJSON
			j, runErr := rd.RunJob(ctx, j, redrive.JobRunParams{Holder: holder, Lease: lease, Target: targets.target,
				MaxRedrives: env.maxRedrives, Tick: targets.ingest, Progress: bar.update, CancelOnStop: true})
			bar.finish()
			runErr = interrupted(ctx, j, runErr)
			w := cmd.OutOrStdout()
			if asJSON {
				if err := report.JSON(w, j); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "redrive job %d %s: sent %d, marked needs_manual %d, of %d\n", j.ID, j.State, j.Sent, j.Refused, j.Total)
				printHeldBack(w, j.HeldBack)
			}
			return runErr
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	urlFlag(fl, &url, "")
	brokersFlag(fl, &kbrk)
	fl.DurationVar(&lease, "job-lease", redrive.DefaultJobLease, "how long the job stays this process's between renewals")
	_ = fl.MarkHidden("job-lease")
	jsonFlag(fl, &asJSON, "print the job as JSON when it ends")
	return cmd
}

// interrupted turns the error of a foreground job run whose context
// ended (Ctrl-C: redrive.JobRunParams.CancelOnStop, so the job is
// cancelled and its queue free) into one that says where the job stopped
// and how to go on: 'lily dlq resume' continues an interrupted job after
// its last handled entry. Any other error is returned as it is.
func interrupted(ctx context.Context, j *redrive.Job, runErr error) error {
	if runErr == nil || ctx.Err() == nil || j == nil || j.State != redrive.JobCancelled {
		return runErr
	}
	return fmt.Errorf("interrupted: redrive job %d stopped after %d of %d entries (%d sent; nothing is lost): "+
		"continue it with 'lily dlq resume %d'", j.ID, j.Done(), j.Total, j.Sent, j.ID)
}
