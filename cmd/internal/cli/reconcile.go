package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

func init() { register(newReconcileCmd) }

// reconcileJSON is the --json output of 'lily reconcile'.
type reconcileJSON struct {
	Queues   []ledger.Row `json:"queues"`
	Balanced bool         `json:"balanced"`
	// Unknown sums the queues' unknown shortfalls (ledger.Row.Unknown):
	// messages consumers of other processes may hold, uncounted because
	// the broker's management API is not there.
	Unknown int64 `json:"unknown"`
	// LedgerEvents is the ledger's deduplication memory (docs/ledger.md).
	LedgerEvents ledgerEventsJSON `json:"ledger_events"`
}

// ledgerEventsJSON sums ledger.Ledger.Events over the queues.
type ledgerEventsJSON struct {
	// Kept: per-event rows held; Pruned: rows folded into the counters so
	// far (by every pruner); PrunedNow: rows this run folded (--prune).
	Kept         int64 `json:"kept"`
	Pruned       int64 `json:"pruned"`
	PrunedNow    int64 `json:"pruned_now"`
	HorizonHours int64 `json:"horizon_hours"`
}

// ledgerEvents prunes the ledger when prune is set, then sums its
// deduplication memory.
func ledgerEvents(ctx context.Context, led *ledger.Ledger, prune bool) (ledgerEventsJSON, error) {
	out := ledgerEventsJSON{HorizonHours: int64(led.Horizon() / time.Hour)}
	if prune {
		res, err := led.Prune(ctx, time.Now())
		if err != nil {
			return out, fmt.Errorf("reconcile --prune: %w", err)
		}
		out.PrunedNow = res.Events
	}
	st, err := led.Events(ctx)
	if err != nil {
		return out, fmt.Errorf("reconcile: %w", err)
	}
	for _, e := range st {
		out.Kept += e.Kept
		out.Pruned += e.Pruned
	}
	return out, nil
}

func newReconcileCmd() *cobra.Command {
	var (
		sf     storeFlags
		kbrk   string
		asJSON bool
		settle time.Duration
		prune  bool
	)
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Print the per-queue ledger and fail if any message is unaccounted for",
		Long: `Print each queue's conservation ledger:

  accepted = acked + dead_lettered + discarded + in_flight

and exit 1 when any queue has messages unaccounted for (lost ≠ 0).
Exit 3 when nothing is lost but a shortfall is unknown: on RabbitMQ without
the management plugin the deliveries held by consumers in other processes
cannot be read, so a queue with consumers that does not balance says
"unknown — N may be held by consumers in other processes; enable the
management plugin" (--json: unknown, unknown_why) instead of counting them
lost. Exit 2: bad input.
dead_lettered counts entries held in the dead-letter work list (pending,
parked, needs_manual); discarded counts entries discarded or erased with a
record; in_flight counts messages ready, leased or waiting for a retry.
With --config, queues on a broker are counted there, for every consumer in
every process, and in_flight is broken down (--json: in_flight_ready,
in_flight_retrying, in_flight_unacked, in_flight_dlx):
  RabbitMQ: ready in the queue (ready) and its buckets (retrying);
    delivered to any consumer and not acknowledged (unacked, the management
    API's messages_unacknowledged); dead-lettered by the broker and not yet
    in the DLQ (dlx, messages_dlx). The management API samples these every
    5 s by default, so right after deliveries change hands its figures lag:
    a RabbitMQ queue that does not balance is read again every half second
    for up to --settle (default 12s) before reconcile fails.
  Kafka: records past the group's committed offsets of the topic (ready,
    fetched by a consumer or not) and of its retry topics (retrying).
Dead letters not ingested yet from the DLQ or dead-letter topic count as
dead-lettered. lost is only what nobody holds.
On a broker, each message is counted once by the ledger's per-event rows,
kept for ledger_horizon_hours (default 720) and then folded into the
counters (docs/ledger.md); --prune folds the rows past the horizon now.
A queue fed by other services' producers balances too: a message is
accepted when lily.Publish confirms it or when the runtime first receives
it (once per event ID and body).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tr, cat, err := sf.openExisting(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore(tr, cat)
			c, err := sf.loadConfig()
			if err != nil {
				return err
			}
			counters, closeAll, err := ledgerCounters(cmd.Context(), sqliteCounter(tr), c, "", kbrk)
			defer closeAll()
			if err != nil {
				return err
			}
			led := ledger.New(cat)
			if err := led.SetHorizon(c.LedgerHorizon()); err != nil {
				return err
			}
			if settle < 0 {
				return usagef("--settle %s: must be >= 0 (0: one reading)", settle)
			}
			lagging := func(rows []ledger.Row) bool { // an unbalanced queue whose figures come from sampled statistics
				for _, r := range rows {
					// (An unknown shortfall stays unknown however long it is read.)
					if q, ok := c.Queue(r.Queue); r.Lost != 0 && ok && q.Transport == lily.TransportRabbitMQ {
						return true
					}
				}
				return false
			}
			var rows []ledger.Row
			for deadline := time.Now().Add(settle); ; {
				if rows, err = reconcile(cmd.Context(), cat, counters); err != nil {
					return err
				}
				if !lagging(rows) || time.Now().After(deadline) {
					break
				}
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(500 * time.Millisecond):
				}
			}
			events, err := ledgerEvents(cmd.Context(), led, prune)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			balanced, lost := true, false
			var unknown int64
			for _, r := range rows {
				balanced = balanced && r.Balanced()
				lost = lost || r.Lost != 0
				unknown += r.Unknown
			}
			if asJSON {
				if err := report.JSON(out, reconcileJSON{Queues: rows, Balanced: balanced, Unknown: unknown, LedgerEvents: events}); err != nil {
					return err
				}
			} else {
				report.Ledger(out, rows)
				for _, r := range rows {
					if r.Unknown > 0 {
						fmt.Fprintf(out, "queue %s: unknown — %d may be held by consumers in other processes; enable the management plugin (%s)\n", r.Queue, r.Unknown, r.UnknownWhy)
					}
				}
				if prune {
					fmt.Fprintf(out, "pruned %d ledger event rows older than %d h\n", events.PrunedNow, events.HorizonHours)
				}
				if events.Kept > 0 || events.Pruned > 0 {
					fmt.Fprintf(out, "ledger memory: %d per-event rows kept (horizon %d h), %d folded into the counters\n", events.Kept, events.HorizonHours, events.Pruned)
				}
			}
			if lost {
				return &ExitError{Code: 1, Msg: "reconcile: messages unaccounted for (see the lost column)"}
			}
			if unknown > 0 {
				return &ExitError{Code: exitUnknown, Msg: fmt.Sprintf("reconcile: unknown — %d may be held by consumers in other processes; enable the management plugin (rabbitmq-plugins enable rabbitmq_management) to count them", unknown)}
			}
			if !asJSON {
				fmt.Fprintln(out, "reconcile: OK — every accepted message is acked, dead-lettered, discarded with a record or in flight")
			}
			return nil
		},
	}
	sf.add(cmd)
	brokersFlag(cmd.Flags(), &kbrk)
	jsonFlag(cmd.Flags(), &asJSON, "")
	cmd.Flags().DurationVar(&settle, "settle", 12*time.Second, "how long an unbalanced RabbitMQ queue is read again while the management API's sampled statistics catch up (0: one reading)")
	cmd.Flags().BoolVar(&prune, "prune", false, "first fold the ledger's per-event rows older than ledger_horizon_hours into its counters (they change nothing but the table's size)")
	return cmd
}

// exitUnknown is reconcile's exit code when nothing is lost but some
// messages cannot be accounted for: consumers of other processes may hold
// them, and the broker does not say (RabbitMQ without the management
// plugin). 1 is lost, 2 bad input.
const exitUnknown = 3

// reconcile returns the ledger with in-flight counts from the transport.
func reconcile(ctx context.Context, cat *catalog.Store, inflight transport.InFlightCounter) ([]ledger.Row, error) {
	rows, err := ledger.New(cat).Rows(ctx, inflight)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	if rows == nil {
		rows = []ledger.Row{}
	}
	return rows, nil
}
