package cli

import (
	"github.com/spf13/cobra"
)

// redirectFlag registers --to on 'lily dlq redrive'.
func redirectFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "to", "", "redirect: send the entries to this configured queue (a quarantine, a fixed consumer's queue) instead of their source, audited with both names; entries of a [[foreign_dlq]] may also go to any existing broker queue instead of their origin")
	cmd.Long += `

Redirect (--to QUEUE): the messages go to QUEUE instead of their source —
a quarantine queue, or the queue of a fixed consumer. QUEUE must be a
[[queue]] of --config (without --config: a queue of the SQLite store at
--db) and must exist on its transport; otherwise the redrive is refused
before anything is sent or changed (dry run too), and the refusal is
audited. The audit record of every batch names both queues ("sent to Q
instead of its source S"); the source's ledger counts the entries as
redirected, QUEUE's as accepted. Dry run, --sample/--observe (the sample
must be acked on QUEUE), --rate, max_redrives and jobs work as without it.`
}

// checkRedirect refuses a --to that names no configured queue.
func checkRedirect(env *dlqEnv, to string) error {
	if to == "" {
		return nil
	}
	if env.hasCfg {
		if _, ok := env.queue(to); !ok {
			return usagef("--to %q: not a [[queue]] of --config %s: name a configured queue (nothing was sent or changed)", to, env.sf.config)
		}
	}
	return nil
}
