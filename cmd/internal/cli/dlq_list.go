package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/internal/entryview"
	"github.com/lily-mq/lily/redrive"
)

func init() { registerDLQ(newDLQListCmd) }

// dlqListRow is one queue of 'lily dlq list --json': the queue's figures
// and its held entries per message schema version ("none" for entries
// without one).
type dlqListRow struct {
	entryview.Queue
	SchemaVersions map[string]int64 `json:"schema_versions"`
	// KnownIssue counts the held entries whose triage status is
	// known_issue (their own or their group's); Alarming the rest of the
	// depth, what /healthz and LilyDLQNotEmpty see.
	KnownIssue int64 `json:"known_issue"`
	Alarming   int64 `json:"alarming"`
}

func newDLQListCmd() *cobra.Command {
	var (
		sf     storeFlags
		asJSON bool
		where  string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Per queue: depth, oldest entry, retention deadline, entries past half of it, inflow, owner",
		Long: `List the dead-letter work list of every queue in the catalog:

  depth        entries held: pending + parked + needs_manual
  oldest       age of the oldest held entry
  deadline     when that entry reaches dlq_retention_hours and is discarded
               with a record by 'lily dlq expire'
  known-issue  held entries triaged known_issue (their own status or their
               group's, 'lily dlq triage'): left out of /healthz and the
               LilyDLQNotEmpty alert (JSON: known_issue, and alarming = the rest)
  past-half    held entries older than half their retention: act now
  inflow/1h    entries dead-lettered in the last hour
  owner        the queue's owner from --config (lint warns when it has none)
  schemas      held entries per message schema version (x-lily-schema-version),
               e.g. "v3:12 v4:2 none:1" ('lily dlq group --by schema_version')

Below the table: the parked and blocked keys (ordering "park" and "block"),
each with its head and the number of messages waiting behind it.

Retention and owner come from --config; a queue without a [[queue]] entry
has the default retention (336 hours) and no owner.

With --where EXPR (docs/where.md): per queue, the held entries whose JSON
body matches, and the oldest of them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			if where != "" { // dlq_search.go
				return runListWhere(ctx, cmd.OutOrStdout(), env.cat, where, asJSON)
			}
			now := time.Now()
			stats, err := env.cat.Stats(ctx, now, env.retention)
			if err != nil {
				return err
			}
			known, err := env.cat.KnownIssueHeld(ctx)
			if err != nil {
				return err
			}
			rows := make([]dlqListRow, len(stats))
			for i, st := range stats {
				rows[i].KnownIssue, rows[i].Alarming = known[st.Queue], max(0, st.Depth-known[st.Queue])
				q, _ := env.queue(st.Queue)
				rows[i].Queue = entryview.NewQueue(st, q.Owner, now)
				if rows[i].SchemaVersions, err = heldSchemaVersions(ctx, env.cat, st.Queue); err != nil {
					return err
				}
			}
			keys, err := redrive.NewKeys(env.cat).HeldKeys(ctx, "")
			if err != nil {
				return err
			}
			if keys == nil {
				keys = []redrive.HeldKey{}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(out, map[string]any{"queues": rows, "held_keys": keys})
			}
			if len(rows) == 0 {
				fmt.Fprintf(out, "no queues in the catalog %s yet\n", env.path)
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "queue\tdepth\tpending\tparked\tneeds-manual\tknown-issue\toldest\tdeadline\tpast-half\tinflow/1h\towner\tschemas\t")
			for _, r := range rows {
				oldest, deadline := "-", "-"
				if r.Oldest != nil {
					oldest = humanAge(now.Sub(*r.Oldest))
					deadline = r.Deadline.Local().Format("2006-01-02 15:04")
					if left := r.Deadline.Sub(now); left > 0 {
						deadline += " (in " + humanAge(left) + ")"
					} else {
						deadline += " (passed: run 'lily dlq expire')"
					}
				}
				owner := r.Owner
				if owner == "" {
					owner = "(none)"
				}
				past := fmt.Sprint(r.PastHalfRetention)
				if r.PastHalfRetention > 0 {
					past += " !"
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t\n", r.Queue.Queue, r.Depth, r.Pending, r.Parked, r.NeedsManual, r.KnownIssue,
					oldest, deadline, past, r.InflowLastHour, owner, schemaVersionsText(r.SchemaVersions))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(keys) > 0 {
				fmt.Fprintf(out, "\n%d parked or blocked keys: their later messages wait, in order ('lily dlq unpark', or redrive or discard the head)\n", len(keys))
				return printHeldKeys(out, keys, now)
			}
			return nil
		},
	}
	sf.add(cmd)
	jsonFlag(cmd.Flags(), &asJSON, "")
	addWhereFlag(cmd, &where)
	return cmd
}

// humanAge renders a duration for people: 45s, 12m, 5h10m, 3d4h.
func humanAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
