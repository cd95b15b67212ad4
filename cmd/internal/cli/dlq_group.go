package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
)

func init() { registerDLQ(newDLQGroupCmd) }

// dlqGroupJSON is the --json output of 'lily dlq group'.
type dlqGroupJSON struct {
	By     string          `json:"by"`
	Total  int64           `json:"total"`
	Groups []catalog.Group `json:"groups"`
}

func newDLQGroupCmd() *cobra.Command {
	var (
		sf     storeFlags
		sel    = selectFlags{withStates: true}
		by     string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "group --by reason|error_type|fingerprint|consumer_version|source|schema_version",
		Short: "Group the work list: counts, first and last seen, one sample entry ID per group",
		Long: `Group the held entries (or --state ...) by one column, largest group first,
with the first and last time an entry of the group was dead-lettered and the ID
of its most recent entry ('lily dlq show ID').

  reason            why it was dead-lettered (permanent, retries_exhausted, ...)
  error_type        the Go error type
  fingerprint       the error message with numbers, IDs and quoted values
                    replaced: "order 123 not found" and "order 9 not found"
                    are one group ("order <n> not found")
  consumer_version  the version of the consumer that failed
  source            where it failed (transport/queue)
  schema_version    the message schema version (x-lily-schema-version);
                    "(none)" for messages without one

Any filter narrows the entries grouped; a group's key can be passed back as a
filter (--reason, --error-type, --fingerprint, ...) to redrive or discard it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch by {
			case "reason", "error_type", "fingerprint", "consumer_version", "source", "queue", "state", "schema_version":
			case "":
				return usagef("group: --by is required: reason, error_type, fingerprint, consumer_version, source or schema_version")
			default:
				return usagef("--by %q: must be reason, error_type, fingerprint, consumer_version, source, schema_version, queue or state", by)
			}
			f, err := sel.filter(time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			if err := sel.checkNames(ctx, env); err != nil {
				return err
			}
			groups, err := env.cat.Group(ctx, by, f)
			if err != nil {
				return err
			}
			if by == "fingerprint" {
				if err := env.cat.AttachGroupTriage(ctx, f.Queue, groups); err != nil {
					return err
				}
			}
			out := dlqGroupJSON{By: by, Groups: groups}
			if out.Groups == nil {
				out.Groups = []catalog.Group{}
			}
			for _, g := range groups {
				out.Total += g.Count
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(w, out)
			}
			if len(groups) == 0 {
				fmt.Fprintln(w, "no entries match: nothing to group")
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			triageCol := map[bool]string{true: "triage\t", false: ""}[by == "fingerprint"]
			fmt.Fprintf(tw, "count\t%s\tfirst seen\tlast seen\tsample ID\t%s\n", by, triageCol)
			for _, g := range groups {
				key := g.Key
				if key == "" {
					key = "(none)"
				}
				tri := ""
				if by == "fingerprint" {
					tri = strings.ReplaceAll(groupTriageText(g.Triage, f.Queue != ""), "\t", " ") + "\t"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", g.Count, strings.ReplaceAll(key, "\t", " "),
					g.FirstSeen.Local().Format("2006-01-02 15:04:05"), g.LastSeen.Local().Format("2006-01-02 15:04:05"), g.SampleID, tri)
			}
			tw.Flush()
			fmt.Fprintf(w, "%d entries in %d groups\n", out.Total, len(groups))
			return nil
		},
	}
	sf.add(cmd)
	sel.add(cmd)
	cmd.Flags().StringVar(&by, "by", "", "reason, error_type, fingerprint, consumer_version, source or schema_version (also queue, state)")
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}
