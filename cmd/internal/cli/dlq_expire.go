package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
)

func init() { registerDLQ(newDLQExpireCmd) }

func newDLQExpireCmd() *cobra.Command {
	var (
		sf             storeFlags
		queues         string
		actor          string
		dryRun, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "expire",
		Short: "Discard, with a record, held entries past their queue's dlq_retention_hours",
		Long: `Discard the held entries (pending, parked, needs_manual) dead-lettered longer
ago than their queue's dlq_retention_hours (from --config; 336 hours for a
queue not in it). Never silently: each entry records who, when and the
retention it passed, and the audit log records every batch. 'lily dlq list'
warns before: its past-half column counts the entries past half their
retention.

Run it periodically (cron), or call catalog.Store.Expire from a long-running
consumer. A run that finds nothing writes no audit record.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq expire")
			if err != nil {
				return err
			}
			defer stopTraces()
			var qs []string
			for _, q := range strings.Split(queues, ",") {
				if q = strings.TrimSpace(q); q != "" {
					qs = append(qs, q)
				}
			}
			out := newDecisionOutput(cmd, asJSON, dryRun, "expired")
			res, err := env.cat.Expire(ctx, catalog.ExpireParams{Queues: qs, Retention: env.retention, DryRun: dryRun,
				Actor: actorOr(actor), OnEntry: out.entry})
			if !asJSON && err == nil {
				for q, n := range res.ByQueue {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d past %s retention\n", q, n, env.retention(q))
				}
			}
			return out.end(decideJSON{Op: res.Op, Action: catalog.ActionExpire, DryRun: dryRun, Count: res.Count, ByQueue: res.ByQueue}, err)
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&queues, "queue", "", "only these queues, comma-separated (default: every queue)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would expire; change nothing")
	actorFlag(cmd, &actor)
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}
