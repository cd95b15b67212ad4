package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/redrive"
)

func init() { registerDLQ(newDLQRedriveCmd) }

// redriveJSON is the --json output of 'lily dlq redrive' (after the
// streamed "entries" of a dry run).
type redriveJSON struct {
	// Job is the redrive job's ID in the catalog ('lily dlq jobs'); 0 for
	// a dry run, which makes no job.
	Job         int64  `json:"job,omitempty"`
	Op          string `json:"op"`
	DryRun      bool   `json:"dry_run"`
	Selected    int    `json:"selected"`
	Redriven    int    `json:"redriven"`
	NeedsManual int    `json:"needs_manual"`
	// HeldBack are the delivery_limit entries left pending
	// (--include-crashers, --new-consumer-version).
	HeldBack       int                `json:"held_back"`
	Sample         *sampleJSON        `json:"sample,omitempty"`
	Rate           float64            `json:"rate,omitempty"`
	AchievedRate   float64            `json:"achieved_rate,omitempty"`
	DurationMillis int64              `json:"duration_ms"`
	Stopped        bool               `json:"stopped"`
	Returned       []catalog.EntryRef `json:"returned,omitempty"`
	// To is the queue a redirected redrive (--to) sent to.
	To string `json:"to,omitempty"`
	// SchemaWarnings are the target queues whose consumers may not read
	// some selected entries' schema versions.
	SchemaWarnings []schemaMismatch `json:"schema_warnings,omitempty"`
}

// sampleJSON describes the sample of a sampled redrive.
type sampleJSON struct {
	Size     int      `json:"size"`
	Observe  string   `json:"observe"`
	EventIDs []string `json:"event_ids"`
	Clean    bool     `json:"clean"`
}

// redriveEntryJSON is one entry of a dry run's listing.
type redriveEntryJSON struct {
	ID           int64  `json:"id"`
	Queue        string `json:"queue"`
	EventID      string `json:"event_id"`
	RedriveCount int    `json:"redrive_count"`
	Outcome      string `json:"outcome"`
}

type redriveFlags struct {
	sf      storeFlags
	sel     selectFlags
	url     string
	brokers string
	actor   string
	dryRun  bool
	sample  int
	observe time.Duration
	rate    float64
	asJSON  bool
	force   bool
	// crashers
	newVersion      string
	includeCrashers bool
	lease           time.Duration
	to              string // --to: redirect (dlq_redirect.go), or a [[foreign_dlq]] entry's new origin
}

func newDLQRedriveCmd() *cobra.Command {
	f := redriveFlags{sel: selectFlags{withLimit: true}}
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send pending dead letters back to their source queues: dry run, sample, rate, audit",
		Long: `Send the selected pending entries back to their source queue — never to a
shared exchange or topic — after the bug that dead-lettered them is fixed.

Each message keeps its event ID, key, type, body and original headers; its
x-retry-count is reset to 0, x-lily-redrive-count goes up by one, and the
evidence of the last dead-lettering is left in the catalog. An entry whose
message was already redriven max_redrives times (per queue in --config,
default 2) is not sent: it becomes needs_manual.

An entry is marked redriven only after the transport confirmed the publish;
a crash in between leaves it pending with its message sent, so running the
command again can make duplicates (same event ID), never lose a message.

  --dry-run            list what would happen; change nothing (still audited)
  --sample N --observe D
                       redrive N entries first and watch their event IDs for
                       D (ingesting broker DLQs meanwhile). The sample passes
                       only when every sampled message was acked by a consumer
                       within D (the ledger, or the SQLite queue, knows); if one
                       is dead-lettered again or retried, or D passes with some
                       not acked ("no consumer acked the sample within D: is a
                       consumer running?"), stop, report it and exit 1 — the
                       rest stays pending. Otherwise go on with the rest.
  --rate R             at most R messages per second (token bucket)
  --include-crashers   also send delivery_limit entries (see below)
  --new-consumer-version V
                       the consumer version now running fixes the crash: send the
                       delivery_limit entries dead-lettered by another version
  --schema-version N   only entries of message schema version N ('none': without one)
  --force              redrive entries of a schema version the queue's consumers
                       do not read (see below)

Schema versions: when the queue's [[queue]] in --config declares
schema_versions (the x-lily-schema-version values its consumers read), a
selection holding pending entries of another version is refused — the
command says which versions and how many — unless --force is given; the dry
run shows the same warning. Without schema_versions the command warns (and
goes on) when the selection holds versions older than the newest version
among the queue's dead letters. Entries without a version are not compared.

A redrive is a job stored in the catalog ('lily dlq jobs'): it runs here, in
the foreground, and if this process dies (kill -9, a lost host) the job is
resumed after its last handled entry once its lease runs out, by 'lily
serve' or 'lily dlq resume JOB' — nothing is sent twice but the one batch in
flight. Ctrl-C cancels the job; so does 'lily dlq cancel JOB' from anywhere.
One job per queue runs at a time: a second redrive of the queue is refused
with the running job's ID.

Crash-type poison: entries dead-lettered with reason delivery_limit (the
consumer died on the message, again and again) are held back from a bulk
redrive — the command says how many — unless --new-consumer-version V names
the consumer version now running (entries dead-lettered by V itself stay
held back) or --include-crashers is given. Entries picked by --id or
--event-id are never held back.

Queues come from --config ([[queue]] transport); a queue not in it is a queue
of the SQLite store at --db. On Kafka the message is produced to the source
topic (never a retry or dead-letter topic) with its key, so it lands in the
partition its original was in, and the entry is marked only after the
brokers acknowledged the produce (acks=all). A queue that no longer exists stops the redrive
before anything is sent. A selection of nothing is not an error: it prints
"nothing to redrive" and exits 0 (audited as nothing_selected). Every
decision is in 'lily audit'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRedrive(cmd, f) },
	}
	f.sf.add(cmd)
	f.sel.add(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "list what would be redriven or marked needs_manual; change nothing")
	fl.IntVar(&f.sample, "sample", 0, "redrive this many entries first and watch them for --observe")
	fl.DurationVar(&f.observe, "observe", 0, "how long to watch the sample for dead letters (e.g. 30s, 5m)")
	fl.Float64Var(&f.rate, "rate", 0, "at most this many messages per second (0: as fast as the transport confirms)")
	urlFlag(fl, &f.url, "")
	brokersFlag(fl, &f.brokers)
	actorFlag(cmd, &f.actor)
	jsonFlag(fl, &f.asJSON, "")
	fl.BoolVar(&f.force, "force", false, "redrive even entries of a schema version the queue's consumers do not read (schema_versions)")
	fl.BoolVar(&f.includeCrashers, "include-crashers", false, "also redrive delivery_limit entries (crash-type poison), held back otherwise")
	fl.StringVar(&f.newVersion, "new-consumer-version", "", "the consumer version now running, which fixes the crash: redrive the delivery_limit entries of other versions")
	fl.DurationVar(&f.lease, "job-lease", redrive.DefaultJobLease, "how long the job stays this process's between renewals (another runner resumes it after)")
	_ = fl.MarkHidden("job-lease")
	redirectFlag(cmd, &f.to)
	return cmd
}

func (f redriveFlags) validate() error {
	switch {
	case f.sample < 0:
		return usagef("--sample %d: must be >= 1", f.sample)
	case f.sample > 10000:
		return usagef("--sample %d: must be at most 10000 (a sample is a few messages to watch)", f.sample)
	case f.sample > 0 && f.observe <= 0:
		return usagef("--sample %d needs --observe DURATION: how long to watch the sample (e.g. --observe 1m)", f.sample)
	case f.observe != 0 && f.sample == 0:
		return usagef("--observe %s needs --sample N: the number of entries to redrive first and watch", f.observe)
	case f.observe < 0:
		return usagef("--observe %s: must be > 0", f.observe)
	case f.rate < 0:
		return usagef("--rate %g: must be 0 or more messages per second (0: as fast as the transport confirms)", f.rate)
	case f.sample > 0 && f.sel.limit > 0 && f.sample > f.sel.limit:
		return usagef("--sample %d: must be <= --limit %d", f.sample, f.sel.limit)
	case f.includeCrashers && f.newVersion != "":
		return usagef("--include-crashers and --new-consumer-version %q: give one (--include-crashers sends every delivery_limit entry)", f.newVersion)
	case f.lease <= 0:
		return usagef("--job-lease %s: must be > 0", f.lease)
	}
	return nil
}

func runRedrive(cmd *cobra.Command, f redriveFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	filter, err := f.sel.filter(time.Now())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	env, err := openDLQ(ctx, f.sf)
	if err != nil {
		return err
	}
	defer env.Close()
	if err := f.sel.checkNames(ctx, env); err != nil {
		return err
	}
	if _, err := brokersFlagValue(f.brokers); err != nil {
		return err
	}
	// --to names a configured queue (a redirect, dlq_redirect.go), or —
	// only for entries of a [[foreign_dlq]] — any broker queue that takes
	// the place of each message's origin (dlq_foreign.go).
	to, foreignTo := f.to, false
	if f.to != "" && env.hasCfg && len(env.cfg.ForeignDLQs) > 0 {
		if _, configured := env.queue(f.to); !configured {
			to, foreignTo = "", true
		}
	}
	if err := checkRedirect(env, to); err != nil {
		return err
	}
	targets := &redriveTargets{env: env, url: f.url, brokers: f.brokers, to: f.to, foreignTo: foreignTo}
	defer targets.Close()
	w := cmd.OutOrStdout()
	actor := actorOr(f.actor)
	op := catalog.NewOp(time.Now())
	bar := newProgressBar(cmd.ErrOrStderr())
	if f.asJSON {
		bar.on = false
	}
	p := redrive.Params{
		Filter: filter, Limit: f.sel.limit, DryRun: f.dryRun, Rate: f.rate, MaxRedrives: env.maxRedrives,
		Target: targets.target, Actor: actor, Op: op, Progress: bar.update,
		IncludeCrashers: f.includeCrashers, NewConsumerVersion: f.newVersion, To: to,
	}
	if f.sample > 0 {
		p.Options = fmt.Sprintf(`"sample":%d,"observe":%q`, f.sample, f.observe.String())
	}
	out := redriveJSON{Op: op, DryRun: f.dryRun, Rate: f.rate, To: f.to}
	if out.SchemaWarnings, err = checkRedriveSchemas(ctx, env, filter); err != nil {
		return err
	}
	if f.asJSON {
		printSchemaWarnings(cmd.ErrOrStderr(), out.SchemaWarnings, f.force)
	} else {
		printSchemaWarnings(w, out.SchemaWarnings, f.force)
	}
	if !f.dryRun && !f.force && schemaRefused(out.SchemaWarnings) {
		return fmt.Errorf("redrive refused: the selection holds entries of schema versions the target queue's consumers do not read " +
			"(see the warning above); nothing was sent or changed")
	}
	start := time.Now()
	if f.dryRun {
		return dryRunRedrive(cmd, env.cat, p, out, f.asJSON)
	}
	holder := runnerName("cli")
	job, err := redrive.New(env.cat).CreateJob(ctx, redrive.JobSpec{Filter: filter, Limit: f.sel.limit, Rate: f.rate, Sample: f.sample, Observe: f.observe,
		NewConsumerVersion: f.newVersion, IncludeCrashers: f.includeCrashers, To: to, Actor: actor, Op: op, Holder: holder, Lease: f.lease})
	if err != nil {
		return err
	}
	out.Job = job.ID
	if !f.asJSON {
		fmt.Fprintf(w, "redrive job %d: %d pending entries planned\n", job.ID, job.Total)
	}
	var restAt time.Time
	restFrom := 0
	tp, stopTraces, err := tracerFromEnv(ctx, "lily dlq redrive", "lily-dlq-redrive", cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stopTraces()
	env.useTracer(tp) // the ingest between the sample and the rest is traced too
	rd := redrive.New(env.cat)
	rd.TracerProvider = tp // nil without OTEL_*: not traced
	job, runErr := rd.RunJob(ctx, job, redrive.JobRunParams{Holder: holder, Lease: f.lease, Target: targets.target,
		MaxRedrives: env.maxRedrives, Tick: targets.ingest, Progress: bar.update, CancelOnStop: true,
		OnStage: func(stage string, sampled []string) {
			switch stage {
			case redrive.StageObserve:
				bar.finish()
				if !f.asJSON {
					fmt.Fprintf(w, "sample: %d redriven; waiting up to %s for a consumer to ack them ...\n", len(sampled), f.observe)
				}
			case redrive.StageRest:
				restAt = time.Now()
			}
		},
		OnEntry: func(_ catalog.EntryRef, outcome string) {
			if restAt.IsZero() && outcome == catalog.OutcomeRedriven {
				restFrom++
			}
		},
	})
	out.HeldBack = job.HeldBack
	if f.sample > 0 {
		out.Sample = &sampleJSON{Size: f.sample, Observe: f.observe.String(), EventIDs: []string{}, Clean: job.SampleClean}
		for _, m := range job.Sampled {
			out.Sample.EventIDs = append(out.Sample.EventIDs, m.EventID)
		}
		out.Stopped, out.Returned = job.State == redrive.JobStopped, job.Returned
		if runErr == nil && len(job.Sampled) == 0 && job.Done() > 0 && !f.asJSON {
			// Every sampled entry was at max_redrives: nothing was tried.
			fmt.Fprintln(w, "the sample sent nothing (its entries were at max_redrives and are now needs_manual); run again to sample the next entries")
		}
	}
	bar.finish()
	runErr = interrupted(ctx, job, runErr)
	elapsed := time.Since(start)
	out.Selected, out.Redriven, out.NeedsManual = job.Done()+job.Failed, job.Sent, job.Refused
	out.DurationMillis = elapsed.Milliseconds()
	if f.rate > 0 && !restAt.IsZero() && job.Sent > restFrom {
		out.AchievedRate = float64(job.Sent-restFrom) / time.Since(restAt).Seconds()
	}
	if f.asJSON {
		if err := report.JSON(w, out); err != nil {
			return err
		}
	} else {
		printRedriveSummary(w, out, runErr == nil)
	}
	if runErr != nil {
		return runErr
	}
	return nil
}

func printRedriveSummary(w io.Writer, out redriveJSON, ok bool) {
	if out.Selected == 0 && ok {
		fmt.Fprintln(w, "nothing to redrive: no pending entry matches the selection (nothing changed)")
		return
	}
	fmt.Fprintf(w, "redriven %d, marked needs_manual %d, of %d selected, in %s", out.Redriven, out.NeedsManual, out.Selected,
		(time.Duration(out.DurationMillis) * time.Millisecond).String())
	if out.AchievedRate > 0 {
		fmt.Fprintf(w, " (%.1f/s; --rate %g)", out.AchievedRate, out.Rate)
		if out.AchievedRate < 0.95*out.Rate && float64(out.Redriven) >= out.Rate {
			fmt.Fprintf(w, "\nnote: the transport confirmed fewer messages per second than --rate asked; the rate was not the limit")
		}
	}
	fmt.Fprintf(w, "\noperation %s (see 'lily audit'), job %d\n", out.Op, out.Job)
	if out.Sample != nil && out.Sample.Clean {
		fmt.Fprintf(w, "sample of %d: every message acked within %s\n", len(out.Sample.EventIDs), out.Sample.Observe)
	}
	printHeldBack(w, out.HeldBack)
	for _, r := range out.Returned {
		fmt.Fprintf(w, "dead-lettered again: %s (new entry %d in %s)\n", r.EventID, r.ID, r.Queue)
	}
}

// dryRunRedrive lists what a redrive would do, streaming the entries.
func dryRunRedrive(cmd *cobra.Command, cat *catalog.Store, p redrive.Params, out redriveJSON, asJSON bool) error {
	w := cmd.OutOrStdout()
	var js jsonStream
	if asJSON {
		js.begin(w, "entries")
	} else {
		fmt.Fprintln(w, "dry run: nothing is sent or changed")
	}
	p.Progress = nil
	p.OnEntry = func(e catalog.EntryRef, outcome string) {
		if asJSON {
			js.item(redriveEntryJSON{ID: e.ID, Queue: e.Queue, EventID: e.EventID, RedriveCount: e.RedriveCount, Outcome: outcome})
			return
		}
		what := "would redrive to " + e.Queue
		if p.To != "" && p.To != e.Queue {
			what = "would redirect to " + p.To + " (source " + e.Queue + ")"
		}
		if outcome == catalog.OutcomeWouldNeedManual {
			what = "would mark needs_manual (at max_redrives)"
		}
		fmt.Fprintf(w, "  entry %-8d %-40s redrives %d  %s\n", e.ID, e.EventID, e.RedriveCount, what)
	}
	res, err := redrive.New(cat).Redrive(cmd.Context(), p)
	out.Selected, out.Redriven, out.NeedsManual, out.HeldBack = res.Selected, res.Redriven, res.NeedsManual, res.HeldBack
	out.DurationMillis = res.Elapsed.Milliseconds()
	if asJSON {
		if jerr := js.end(out); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return err
	}
	printHeldBack(w, res.HeldBack)
	if res.Selected == 0 {
		fmt.Fprintln(w, "nothing to redrive: no pending entry matches the selection")
		return nil
	}
	fmt.Fprintf(w, "would redrive %d and mark %d needs_manual, of %d selected (operation %s, audited as a dry run)\n",
		res.Redriven, res.NeedsManual, res.Selected, out.Op)
	return nil
}

// printHeldBack says how many crashers a redrive left out and how to
// include them.
func printHeldBack(w io.Writer, n int) {
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "held back %d delivery_limit entries (crash-type poison: the consumer died on them; they stay pending): "+
		"to redrive them name the fixed consumer version with --new-consumer-version V, or pass --include-crashers\n", n)
}

// runnerName names a job runner for its lease: kind, host, process and a
// random suffix.
func runnerName(kind string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%s-%d-%s", kind, host, os.Getpid(), catalog.NewOp(time.Now())[17:])
}
