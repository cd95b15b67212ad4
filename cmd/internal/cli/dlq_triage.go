package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
)

func init() { registerDLQ(newDLQTriageCmd) }

// triageJSON is the --json output of 'lily dlq triage' (after the streamed
// "entries" of an entry triage).
type triageJSON struct {
	Op     string               `json:"op"`
	Target string               `json:"target"` // "entries" or "group"
	Count  int                  `json:"count"`
	Groups []catalog.GroupKey   `json:"groups"`
	Change catalog.TriageChange `json:"change"`
}

func newDLQTriageCmd() *cobra.Command {
	var (
		sf                           storeFlags
		sel                          = selectFlags{withLimit: true, withStates: true}
		assign, status, ticket, note string
		actor                        string
		asJSON                       bool
	)
	cmd := &cobra.Command{
		Use:   "triage (--ids ID,... | filters | --fingerprint F [--queue Q]) [--assign NAME] [--status S] [--ticket URL] [--note TEXT]",
		Short: "Triage entries or a group: who owns it, its status, the ticket, a note history; audited",
		Long: `Record the triage of dead letters: who owns them (--assign NAME), what state
the investigation is in (--status investigating, needs_fix, known_issue or
wont_fix), where the ticket is (--ticket, an http:// or https:// URL) and a
note (--note TEXT, appended to an append-only history). A flag given with
an empty value (--assign "") clears that field; flags not given are left
as they are. Every change is one audit record (action triage, the change as
its detail, the actor from --actor or the OS user).

Entries or a group:
  --ids ID,... or any filter (--queue, --reason, --error-type, --key,
  --older-than, ...; held entries unless --state) triage each selected entry.

  --fingerprint F alone, or with --queue Q, triages the GROUP: the entries of
  queue Q that share the error fingerprint F (as 'lily dlq group --by
  fingerprint' prints it). Without --queue, the group in every queue that has
  entries of F. The record belongs to the group, not to today's entries: a
  dead letter that arrives later with the same fingerprint inherits its
  status. An entry's own status, when it has one, wins over its group's.

known_issue on a group keeps /healthz and the LilyDLQNotEmpty alert quiet
for that fingerprint in that queue (the metric lily_dlq_alarming_entries
leaves its entries out): new fingerprints still alarm, and so do the
retention deadline (LilyDLQEntryPastHalfRetention) and an inflow spike
(LilyDLQInflowSpike). 'lily dlq show', 'lily dlq group --by fingerprint'
and 'lily dlq list' show the triage.`,
		Example: `  lily dlq triage --ids 42,43 --assign alice --status investigating --note "tax service timeouts"
  lily dlq triage --queue orders.created --fingerprint 'invalid character <q> at offset <n>' \
      --status known_issue --ticket https://tracker.example.com/SHOP-118 --note "old mobile app, fixed in 4.2"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			var ch catalog.TriageChange
			if fl.Changed("assign") {
				ch.Assignee = &assign
			}
			if fl.Changed("status") {
				ch.Status = &status
			}
			if fl.Changed("ticket") {
				ch.Ticket = &ticket
			}
			ch.Note = note
			if err := ch.Validate(); err != nil {
				return usagef("%s", triageFlagError(err))
			}
			group := fl.Changed("fingerprint") && onlyQueueAndFingerprint(cmd)
			f, err := sel.filter(time.Now())
			if err != nil {
				return err
			}
			if !group && !hasSelection(cmd) {
				return usagef("triage: name what to triage: --ids ID,..., a filter (--queue, --reason, ...), or a group with --fingerprint F [--queue Q]")
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq triage")
			if err != nil {
				return err
			}
			defer stopTraces()
			if err := sel.checkNames(ctx, env); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			out := triageJSON{Change: ch}
			if group {
				out.Target = "group"
				res, err := env.cat.TriageGroup(ctx, catalog.TriageGroupParams{Queue: sel.queue, Fingerprint: sel.fingerprint, Change: ch, Actor: actorOr(actor)})
				if errors.Is(err, catalog.ErrNoGroup) {
					return usagef("%v", err)
				}
				if err != nil {
					return err
				}
				out.Op, out.Count, out.Groups = res.Op, res.Count, res.Groups
				if asJSON {
					return report.JSON(w, out)
				}
				for _, g := range res.Groups {
					fmt.Fprintf(w, "group %s / %s triaged: %s\n", g.Queue, g.Fingerprint, describeChange(ch))
				}
				fmt.Fprintf(w, "%d held entries in %d groups now; later dead letters with this fingerprint inherit the group's status (operation %s; see 'lily audit')\n",
					res.Count, len(res.Groups), res.Op)
				return nil
			}
			out.Target = "entries"
			var js jsonStream
			if asJSON {
				js.begin(w, "entries")
			}
			res, err := env.cat.TriageEntries(ctx, catalog.TriageParams{Filter: f, Limit: sel.limit, Change: ch, Actor: actorOr(actor),
				OnEntry: func(e catalog.EntryRef) {
					if asJSON {
						js.item(e)
						return
					}
					fmt.Fprintf(w, "  entry %-8d %-40s %-14s %s  triaged\n", e.ID, e.EventID, e.State, e.Queue)
				}})
			out.Op, out.Count, out.Groups = res.Op, res.Count, res.Groups
			if asJSON {
				if jerr := js.end(out); jerr != nil {
					return jerr
				}
				return err
			}
			if err != nil {
				return err
			}
			if res.Count == 0 {
				fmt.Fprintln(w, "nothing to triage: no entry matches the selection (nothing changed)")
				return nil
			}
			fmt.Fprintf(w, "%d entries triaged: %s (operation %s; see 'lily audit')\n", res.Count, describeChange(ch), res.Op)
			return nil
		},
	}
	sf.add(cmd)
	sel.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&assign, "assign", "", `who owns it (a name; "" clears it)`)
	fl.StringVar(&status, "status", "", `investigating, needs_fix, known_issue or wont_fix ("" clears it)`)
	fl.StringVar(&ticket, "ticket", "", `the ticket's http(s) URL ("" clears it)`)
	fl.StringVar(&note, "note", "", "a note, appended to the history (never edited or removed)")
	actorFlag(cmd, &actor)
	jsonFlag(fl, &asJSON, "")
	return cmd
}

// triageFlagError renames a catalog.TriageError's field to its flag.
func triageFlagError(err error) string {
	var te *catalog.TriageError
	if errors.As(err, &te) {
		return "--" + te.Msg
	}
	return err.Error()
}

// selectionFlags are the flags that select entries.
var selectionFlags = []string{"queue", "reason", "error-type", "fingerprint", "consumer-version", "source", "key", "type",
	"older-than", "newer-than", "ids", "event-ids", "redrive-count", "schema-version", "state"}

// hasSelection reports whether any selecting flag was given.
func hasSelection(cmd *cobra.Command) bool {
	for _, n := range selectionFlags {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// onlyQueueAndFingerprint reports whether the selection is --fingerprint,
// with --queue at most: a group.
func onlyQueueAndFingerprint(cmd *cobra.Command) bool {
	for _, n := range selectionFlags {
		if n != "queue" && n != "fingerprint" && cmd.Flags().Changed(n) {
			return false
		}
	}
	return !cmd.Flags().Changed("limit")
}

// describeChange renders a triage change for people.
func describeChange(c catalog.TriageChange) string {
	var parts []string
	set := func(name string, p *string) {
		switch {
		case p == nil:
		case *p == "":
			parts = append(parts, name+" cleared")
		default:
			parts = append(parts, name+" "+*p)
		}
	}
	set("assignee", c.Assignee)
	set("status", c.Status)
	set("ticket", c.Ticket)
	if strings.TrimSpace(c.Note) != "" {
		parts = append(parts, "note added")
	}
	return strings.Join(parts, ", ")
}

// printTriage writes an entry's triage for 'lily dlq show'.
func printTriage(w io.Writer, t *catalog.EntryTriage) {
	if t == nil {
		return
	}
	line := func(who string, r *catalog.Triage) {
		if r == nil {
			return
		}
		var parts []string
		for _, p := range [][2]string{{"status", r.Status}, {"assignee", r.Assignee}, {"ticket", r.Ticket}} {
			if p[1] != "" {
				parts = append(parts, p[0]+" "+p[1])
			}
		}
		fmt.Fprintf(w, "  %-18s %s (by %s at %s)\n", who, orDash(strings.Join(parts, ", ")), r.UpdatedBy, r.UpdatedAt.Format(time.RFC3339))
		for _, n := range r.Notes {
			fmt.Fprintf(w, "    note %s %s: %s\n", n.At.Format(time.RFC3339), n.Author, n.Note)
		}
	}
	fmt.Fprintf(w, "  %-18s %s\n", "triage status", orDash(t.Status))
	line("entry triage", t.Entry)
	line("group triage", t.Group)
}

// groupTriageText renders a group's triage records for the group table.
func groupTriageText(ts []catalog.GroupTriage, oneQueue bool) string {
	var parts []string
	for _, t := range ts {
		s := orDash(t.Status)
		if t.Assignee != "" {
			s += " @" + t.Assignee
		}
		if !oneQueue {
			s = t.Queue + ": " + s
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}
