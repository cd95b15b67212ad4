package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/entryview"
)

func init() {
	registerDLQ(newDLQDiscardCmd)
	registerDLQ(newDLQEraseCmd)
}

// decideJSON is the --json output of discard, erase and expire (after the
// streamed "entries").
type decideJSON = entryview.Decision

// decisionOutput prints the entries a decision covers, streamed: one line
// each, or the "entries" array of the JSON object.
type decisionOutput struct {
	cmd    *cobra.Command
	asJSON bool
	verb   string
	js     jsonStream
	bar    *progressBar // the running count on stderr
	n      int          // entries so far
}

func newDecisionOutput(cmd *cobra.Command, asJSON, dryRun bool, verb string) *decisionOutput {
	o := &decisionOutput{cmd: cmd, asJSON: asJSON, verb: verb, bar: newProgressBar(cmd.ErrOrStderr())}
	// The count is drawn on a terminal only, never with --json, and not
	// when the entry lines go to that terminal themselves (they would be
	// drawn over): it is for an output sent to a file or a pipe.
	o.bar.on = o.bar.on && !asJSON && !isTerminal(cmd.OutOrStdout())
	if dryRun {
		o.verb = "would be " + verb
	}
	if asJSON {
		o.js.begin(cmd.OutOrStdout(), "entries")
	} else if dryRun {
		fmt.Fprintln(cmd.OutOrStdout(), "dry run: nothing is changed")
	}
	return o
}

func (o *decisionOutput) entry(e catalog.EntryRef) {
	o.n++
	o.bar.count(o.verb, o.n, "")
	if o.asJSON {
		o.js.item(e)
		return
	}
	fmt.Fprintf(o.cmd.OutOrStdout(), "  entry %-8d %-40s %-14s %s  %s\n", e.ID, e.EventID, e.State, e.Queue, o.verb)
}

// end finishes the output with the summary.
func (o *decisionOutput) end(sum decideJSON, err error) error {
	o.bar.finish()
	w := o.cmd.OutOrStdout()
	if o.asJSON {
		if jerr := o.js.end(sum); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return err
	}
	if sum.Count == 0 {
		fmt.Fprintf(w, "nothing to %s: no entry matches the selection (nothing changed)\n", sum.Action)
		return nil
	}
	what := map[bool]string{true: "would be " + o.verbPast(sum.Action), false: o.verbPast(sum.Action)}[sum.DryRun]
	fmt.Fprintf(w, "%d entries %s (operation %s; see 'lily audit')\n", sum.Count, what, sum.Op)
	return nil
}

func (o *decisionOutput) verbPast(action string) string {
	return map[string]string{catalog.ActionDiscard: "discarded", catalog.ActionErase: "erased", catalog.ActionExpire: "expired"}[action]
}

func newDLQDiscardCmd() *cobra.Command {
	var (
		sf     storeFlags
		sel    = selectFlags{withLimit: true, withStates: true, reasonFlag: "dead-letter-reason"}
		reason string
		actor  string
		dryRun bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "discard --reason TEXT [filters]",
		Short: "Take entries out of the work list for good, with a record: who, when, why",
		Long: `Mark the selected held entries (pending, parked, needs_manual) discarded. The
record keeps the event ID, the reason and evidence columns, the body's
SHA-256 and size, who (--actor or the OS user), when and why (--reason,
required); the body and headers are removed in the same transaction (a dead
letter holds personal data: a discard is its end of life). The ledger
counts them as discarded.

Filters are those of 'lily dlq redrive', except that the dead-letter reason
filter is --dead-letter-reason (--reason is the decision's reason). A
selection of nothing is not an error (exit 0; audited as nothing_selected).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("discard: --reason TEXT is required: why these entries are dropped, kept with the record (e.g. --reason \"malformed bodies, cannot be fixed; reported to shop-web\")")
			}
			f, err := sel.filter(time.Now())
			if err != nil {
				return err
			}
			for _, st := range f.States {
				if !st.IsHeld() {
					return usagef("--state %s: only held entries (pending, parked, needs_manual) can be discarded", st)
				}
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq discard")
			if err != nil {
				return err
			}
			defer stopTraces()
			if err := sel.checkNames(ctx, env); err != nil {
				return err
			}
			out := newDecisionOutput(cmd, asJSON, dryRun, "discarded")
			res, err := env.cat.Discard(ctx, catalog.DecideParams{Filter: f, Limit: sel.limit, DryRun: dryRun, Reason: reason,
				Actor: actorOr(actor), OnEntry: out.entry})
			return out.end(decideJSON{Op: res.Op, Action: catalog.ActionDiscard, DryRun: dryRun, Count: res.Count, Reason: reason}, err)
		},
	}
	sf.add(cmd)
	sel.add(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why the entries are discarded (required; kept with the record)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be discarded; change nothing")
	actorFlag(cmd, &actor)
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}

func newDLQEraseCmd() *cobra.Command {
	var (
		sf                         storeFlags
		key, ids, eventIDs, reason string
		actor                      string
		dryRun, asJSON             bool
	)
	cmd := &cobra.Command{
		Use:   "erase --key K | --ids ID,... | --event-ids E,...",
		Short: "Erase a data subject's dead letters: remove bodies and headers, keep tombstones",
		Long: `Remove the body, headers and error message of every catalog entry of a data
subject — by message key, entry IDs or event IDs — in any state. Each entry
stays as a tombstone: event ID, key, body SHA-256, reason, when and who erased
it. A held entry becomes erased (counted as discarded in the ledger); a
redriven or discarded one keeps its state. The erasure is audited (the audit
record names the selector and the event IDs, not the payloads).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel := selectFlags{key: key, ids: ids, eventIDs: eventIDs, redriveCount: -1}
			f, err := sel.filter(time.Now())
			if err != nil {
				return err
			}
			if f.Key == "" && len(f.IDs) == 0 && len(f.EventIDs) == 0 {
				return usagef("erase: name the data subject: --key K, --ids ID,... or --event-ids E,...")
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq erase")
			if err != nil {
				return err
			}
			defer stopTraces()
			if err := sel.checkNames(ctx, env); err != nil {
				return err
			}
			out := newDecisionOutput(cmd, asJSON, dryRun, "erased")
			res, err := env.cat.Erase(ctx, catalog.DecideParams{Filter: f, DryRun: dryRun, Reason: reason, Actor: actorOr(actor), OnEntry: out.entry})
			return out.end(decideJSON{Op: res.Op, Action: catalog.ActionErase, DryRun: dryRun, Count: res.Count, Reason: reason}, err)
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&key, "key", "", "the data subject's message key")
	fl.StringVar(&ids, "ids", "", "catalog entry IDs, comma-separated")
	fl.StringVar(&eventIDs, "event-ids", "", "event IDs, comma-separated")
	fl.StringVar(&reason, "reason", "", "why (e.g. the erasure request's reference); recorded")
	fl.BoolVar(&dryRun, "dry-run", false, "list what would be erased; change nothing")
	actorFlag(cmd, &actor)
	jsonFlag(fl, &asJSON, "")
	return cmd
}
