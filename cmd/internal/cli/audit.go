package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
)

func init() { register(newAuditCmd) }

var auditActions = []string{catalog.ActionRedrive, catalog.ActionDiscard, catalog.ActionErase, catalog.ActionExpire, catalog.ActionRefused, catalog.ActionTriage}

func newAuditCmd() *cobra.Command {
	var (
		sf                storeFlags
		since, action, op string
		ids               bool
		asJSON            bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print the audit log: every decision about dead letters, dry runs included",
		Long: `Print the audit log, oldest first: when, who, action (redrive, discard,
erase, expire), the selector (filters and options), dry run or not, how many
entries, their event IDs and the outcome. A command writes one record per
batch it commits (in the same transaction as the change), all under one
operation ID. The log is append-only: nothing in Lily updates or deletes it
(the database refuses it).

  --since 24h | 7d | 2026-11-29T12:00:00Z    only records at or after it
  --action redrive|discard|erase|expire|refused
                                             only that action (refused: a request
                                             the HTTP API turned down for its role)
  --op ID                                    only that operation`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f catalog.AuditFilter
			if since != "" {
				if t, err := time.Parse(time.RFC3339, since); err == nil {
					f.Since = t
				} else if d, err := parseAge(since); err == nil {
					f.Since = time.Now().Add(-d)
				} else {
					return usagef("--since %q: want a duration ago (24h, 7d) or an RFC 3339 time (2026-11-29T12:00:00Z)", since)
				}
			}
			if action != "" {
				ok := false
				for _, a := range auditActions {
					ok = ok || a == action
				}
				if !ok {
					return usagef("--action %q: must be one of %s", action, strings.Join(auditActions, ", "))
				}
				f.Action = action
			}
			f.Op = op
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			w := cmd.OutOrStdout()
			var js jsonStream
			if asJSON {
				js.begin(w, "records")
			}
			n := 0
			err = env.cat.EachAudit(ctx, f, func(r *catalog.AuditRecord) error {
				n++
				if asJSON {
					js.item(r)
					return nil
				}
				dry := ""
				if r.DryRun {
					dry = " (dry run)"
				}
				fmt.Fprintf(w, "%s  %-8s %-18s %6d  by %s  op %s%s\n", r.At.Local().Format("2006-01-02 15:04:05.000"), r.Action,
					r.Outcome, r.Count, r.Actor, r.Op, dry)
				if r.Selector != "" {
					fmt.Fprintf(w, "    selector: %s\n", r.Selector)
				}
				if r.Detail != "" {
					fmt.Fprintf(w, "    detail:   %s\n", r.Detail)
				}
				if ids && len(r.EventIDs) > 0 {
					fmt.Fprintf(w, "    event IDs: %s\n", strings.Join(r.EventIDs, ", "))
				}
				return nil
			})
			if asJSON {
				if jerr := js.end(map[string]int{"count": n}); jerr != nil {
					return jerr
				}
				return err
			}
			if err != nil {
				return err
			}
			if n == 0 {
				fmt.Fprintln(w, "no audit records match")
			}
			return nil
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "only records at or after this: a duration ago (24h, 7d) or an RFC 3339 time")
	fl.StringVar(&action, "action", "", "only this action: redrive, discard, erase, expire, refused or triage")
	fl.StringVar(&op, "op", "", "only this operation ID")
	fl.BoolVar(&ids, "event-ids", false, "also print each record's event IDs (always in --json)")
	jsonFlag(fl, &asJSON, "")
	return cmd
}
