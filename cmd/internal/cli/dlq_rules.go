package cli

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/redrive/rules"
)

func init() { registerDLQ(newDLQRulesCmd) }

// defaultRulesInterval is how often 'lily serve' looks at its
// [[redrive_rule]] triggers.
const defaultRulesInterval = 10 * time.Second

// catalogRules converts the configuration's [[redrive_rule]] entries.
var catalogRules = httpapi.CatalogRules

// rulesJSON is the --json output of 'lily dlq rules' (GET /api/rules).
type rulesJSON = httpapi.RulesView

func newDLQRulesCmd() *cobra.Command {
	var (
		sf     storeFlags
		dryRun bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "rules --config lily.toml [--dry-run] [--json]",
		Short: "Show the [[redrive_rule]] entries, their firings and (--dry-run) what each would do now",
		Long: `List the configuration's [[redrive_rule]] entries and the redrive jobs they
started. 'lily serve' runs the rules: when a rule's trigger occurs — a
breaker of the queue closed after an outage (breaker_closed), or a consumer
of version >= min_consumer_version acked messages of the queue
(consumer_version) — it records a dry run, then creates an ordinary redrive
job (sample, rate, max_redrives, audit; actor "rule:<name>"), once per
occurrence of the trigger, whichever replica sees it first. Both triggers
are written to the catalog by the consumer runtime through
rules.RuntimeRecorder (a lily.Hook).

With --dry-run, each rule's trigger occurrences within its max_age are
shown with what the rule would redrive now: the selection and the number of
pending entries it holds (only its reason: never permanent or
delivery_limit entries unless the rule names that reason). Nothing is
changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sf.config == "" {
				return usagef("rules: --config lily.toml is required: the rules are its [[redrive_rule]] entries")
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			out := rulesJSON{DryRun: dryRun, Rules: env.cfg.RedriveRules, Plans: []rules.Plan{}}
			if out.Rules == nil {
				out.Rules = []config.RedriveRuleConfig{}
			}
			if dryRun {
				if out.Plans, err = rules.New(env.cat).Plan(ctx, catalogRules(env.cfg), time.Now()); err != nil {
					return err
				}
			}
			if out.Firings, err = rules.New(env.cat).Firings(ctx, ""); err != nil {
				return err
			}
			if out.Firings == nil {
				out.Firings = []rules.Firing{}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(w, out)
			}
			if len(out.Rules) == 0 {
				fmt.Fprintf(w, "no [[redrive_rule]] in %s: rule-driven redrive is off\n", sf.config)
				return nil
			}
			for _, r := range catalogRules(env.cfg) {
				fmt.Fprintf(w, "rule %s: when %s on %s, redrive reason %s", r.Name, r.When, r.Queue, r.Reason)
				if r.Fingerprint != "" {
					fmt.Fprintf(w, ", fingerprint %s", r.Fingerprint)
				}
				if r.MinConsumerVersion != "" {
					fmt.Fprintf(w, ", once version >= %s runs", r.MinConsumerVersion)
				}
				fmt.Fprintf(w, " (sample %d, rate %g/s, limit %d)\n", r.Sample, r.Rate, r.Limit)
				for _, p := range out.Plans {
					if p.Rule != r.Name {
						continue
					}
					switch {
					case p.Occurrence == rules.NoTrigger:
						fmt.Fprintf(w, "  would do nothing now: %s\n", p.Trigger)
					case p.Fired:
						fmt.Fprintf(w, "  fired for %s (job %d): %s\n", p.Occurrence, p.JobID, p.Trigger)
					default:
						fmt.Fprintf(w, "  would fire for %s: %s\n    would redrive %d pending entries (%d delivery_limit held back), filter %s\n",
							p.Occurrence, p.Trigger, p.Selected, p.HeldBack, p.Selector)
					}
				}
				for _, f := range out.Firings {
					if f.Rule == r.Name && !dryRun {
						fmt.Fprintf(w, "  fired %s for %s: job %d: %s\n", f.FiredAt.Format(time.RFC3339), f.Occurrence, f.JobID, f.Detail)
					}
				}
			}
			if dryRun {
				fmt.Fprintln(w, "dry run: nothing changed")
			}
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what each rule would do now (changes nothing)")
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}

// startRuleLoop runs, until the returned stop is called, the
// [[redrive_rule]] entries of 'lily serve': every interval, each rule
// whose trigger occurred fires once (rules.Engine.Fire), making a
// queued redrive job that the job runner runs. Nil rules: nothing runs.
func startRuleLoop(ctx context.Context, cat *catalog.Store, rs []rules.Rule, interval time.Duration, logger *slog.Logger, tp trace.TracerProvider) (stop func()) {
	if len(rs) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if _, err := rules.New(cat).Fire(ctx, rules.FireParams{Rules: rs, Logger: logger, TracerProvider: tp}); err != nil && ctx.Err() == nil {
				logger.Error("serve: redrive rules", "err", err)
			}
			signalRulePass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	logger.Info("serve: redrive rules on", "rules", len(rs), "interval", interval)
	return func() {
		cancel()
		wg.Wait()
	}
}
