package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/presence"
)

func init() { register(newQueueCmd) }

func newQueueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Pause or resume the consumers of a queue",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("queue: unknown command %q (see 'lily queue --help')", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newQueuePauseCmd(true), newQueuePauseCmd(false))
	return cmd
}

// queuePauseJSON is the --json answer of 'lily queue pause' and 'resume'.
type queuePauseJSON struct {
	Queue   string `json:"queue"`
	Action  string `json:"action"`
	Changed bool   `json:"changed"`
	Paused  bool   `json:"paused"`
	Reason  string `json:"reason,omitempty"`
	Actor   string `json:"actor"`
}

// newQueuePauseCmd is 'lily queue pause' (pause) or 'lily queue resume'.
func newQueuePauseCmd(pause bool) *cobra.Command {
	var (
		sf                   storeFlags
		queue, reason, actor string
		asJSON               bool
	)
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Let a paused queue's consumers take messages again",
		Long: `Lift the pause of a queue: its consumers fetch again at their next
heartbeat (within one heartbeat interval, 5 s by default). Audited.`,
		Args: cobra.NoArgs,
	}
	if pause {
		cmd.Use = "pause"
		cmd.Short = "Stop a queue's consumers from taking messages, with a record"
		cmd.Long = `Pause a queue: every consumer of it that counts through the catalog
(lily consume, a consumer on ledger.Accounted or the SQLite store) stops
taking new messages at its next heartbeat — within one heartbeat interval
(5 s by default) and one receive wait — and finishes what it has in hand.
The messages wait at the broker with their delivery counts untouched, as
when a circuit breaker is open. The consumers keep running and say
"paused" in their heartbeats ('lily serve', page Consumers). Audited, with
the reason; 'lily queue resume' lifts it.`
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if queue == "" {
			return usagef("%s: --queue is required (the queue whose consumers to %s)", cmd.Name(), cmd.Name())
		}
		ctx := cmd.Context()
		env, err := openDLQ(ctx, sf)
		if err != nil {
			return err
		}
		defer env.Close()
		stopTraces, err := env.traceWrites(cmd, "lily queue "+cmd.Name())
		if err != nil {
			return err
		}
		defer stopTraces()
		if err := env.checkQueue(ctx, "queue", queue); err != nil {
			return err
		}
		out := queuePauseJSON{Queue: queue, Action: cmd.Name(), Actor: actorOr(actor)}
		if pause {
			out.Reason = reason
			out.Changed, err = env.cat.PauseQueue(ctx, queue, reason, out.Actor, time.Now())
			out.Paused = true
		} else {
			out.Changed, err = env.cat.ResumeQueue(ctx, queue, out.Actor, time.Now())
		}
		if err != nil {
			return err
		}
		if asJSON {
			return report.JSON(cmd.OutOrStdout(), out)
		}
		w := cmd.OutOrStdout()
		switch {
		case pause && out.Changed:
			fmt.Fprintf(w, "%s paused: its consumers stop taking messages within %s (their heartbeat)\n", queue, presence.DefaultEvery)
		case pause:
			p, _, _ := env.cat.QueuePause(ctx, queue)
			fmt.Fprintf(w, "%s was already paused (since %s by %s: %s); nothing changed\n", queue, p.PausedAt.Format(time.RFC3339), p.Actor, p.Reason)
		case out.Changed:
			fmt.Fprintf(w, "%s resumed: its consumers take messages again within %s\n", queue, presence.DefaultEvery)
		default:
			fmt.Fprintf(w, "%s was not paused; nothing changed\n", queue)
		}
		return nil
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&queue, "queue", "", "the queue (required)")
	if pause {
		cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log and the console")
	}
	actorFlag(cmd, &actor)
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}
