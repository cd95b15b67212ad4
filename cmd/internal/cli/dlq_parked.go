package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/redrive"
)

func init() {
	registerDLQ(newDLQParkedCmd)
	registerDLQ(newDLQUnparkCmd)
}

func newDLQParkedCmd() *cobra.Command {
	var (
		sf     storeFlags
		queue  string
		url    string
		kbrk   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List the parked and blocked keys: head, state, how many messages wait behind it",
		Long: `List the keys held by a queue with ordering = "park" or "block".

A key is held when one of its messages (the head) was dead-lettered: every
later message of the key waits in the catalog, as a parked entry, in arrival
order, while the other keys flow. Columns:

  mode      park (waits for 'lily dlq unpark') or block (moves on when the
            head is redriven and processed, or discarded)
  state     held (nothing passes) or waiting (one message is on its way:
            a retry, the redriven head, the next parked entry)
  head      the head's entry ID, event ID and state in the catalog
  parked    how many messages wait behind it
  since     when the key was first held

For queues on a broker (--config), the dead-letter queues are ingested first
so that every head is in the catalog.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			targets := &redriveTargets{env: env, url: url, brokers: kbrk}
			defer targets.Close()
			keys, err := redrive.NewKeys(env.cat).HeldKeys(ctx, queue)
			if err != nil {
				return err
			}
			if err := ingestHeads(ctx, targets, keys); err != nil {
				return err
			}
			if keys, err = redrive.NewKeys(env.cat).HeldKeys(ctx, queue); err != nil {
				return err
			}
			if keys == nil {
				keys = []redrive.HeldKey{}
			}
			if asJSON {
				return report.JSON(cmd.OutOrStdout(), map[string]any{"keys": keys})
			}
			return printHeldKeys(cmd.OutOrStdout(), keys, time.Now())
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&queue, "queue", "", "only this queue")
	urlFlag(cmd.Flags(), &url, "")
	brokersFlag(cmd.Flags(), &kbrk)
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}

// ingestHeads drains the broker dead-letter queues of the queues with held
// keys, so that their heads are in the catalog.
func ingestHeads(ctx context.Context, targets *redriveTargets, keys []redrive.HeldKey) error {
	var queues []string
	for _, k := range keys {
		queues = append(queues, k.Queue)
	}
	return targets.ingest(ctx, queues)
}

// printHeldKeys writes the held keys as a table.
func printHeldKeys(w io.Writer, keys []redrive.HeldKey, now time.Time) error {
	if len(keys) == 0 {
		fmt.Fprintln(w, "no parked or blocked keys")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tkey\tmode\tstate\thead\tparked\tsince\t")
	for _, k := range keys {
		head := k.HeadEventID + " (not ingested yet)"
		if k.Head != nil {
			head = fmt.Sprintf("#%d %s (%s)", k.Head.ID, k.HeadEventID, k.Head.State)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s ago\t\n", k.Queue, k.Key, k.Mode, k.State, head, k.Parked, humanAge(now.Sub(k.Since)))
	}
	return tw.Flush()
}

// unparkJSON is the --json output of 'lily dlq unpark'.
type unparkJSON struct {
	redrive.UnparkResult
	// Outcome is "dry_run", "free" (the key flows again), "head_failed"
	// (the head was dead-lettered again; the key stays held), "moving"
	// (still releasing when --wait ended) or "sent" (--wait 0).
	Outcome string `json:"outcome"`
	// Remaining is the number of parked entries still waiting.
	Remaining int64 `json:"remaining"`
}

func newDLQUnparkCmd() *cobra.Command {
	var (
		sf           storeFlags
		queue, key   string
		url, actor   string
		kbrk         string
		dryRun, asJS bool
		wait         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "unpark",
		Short: "Let a parked key move again: redrive its head first, then the parked messages in order",
		Long: `Unpark key --key of queue --queue (ordering "park"; also moves a blocked key).

The head — the message whose failure parked the key — is redriven first
(x-retry-count reset, redrive count +1) and let through alone. Once the
consumer processed it, the parked messages follow one at a time in their
original order, each confirmed by the transport before the next is sent. If
the head fails again it is dead-lettered again and the key stays parked:
fix the consumer (or discard the head with a reason) and unpark again.

A head already discarded or erased is skipped: the parked messages follow at
once. Every step is audited ('lily audit'). --dry-run shows the head and the
number of messages behind it and changes nothing.

The command waits up to --wait for the key to flow again, printing the
outcome; the consumer carries on releasing after that.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case queue == "":
				return usagef("--queue is required: the queue whose key is parked (see 'lily dlq parked')")
			case key == "":
				return usagef("--key is required: the parked key (see 'lily dlq parked')")
			case wait < 0:
				return usagef("--wait %s: must be >= 0", wait)
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq unpark")
			if err != nil {
				return err
			}
			defer stopTraces()
			targets := &redriveTargets{env: env, url: url, brokers: kbrk}
			defer targets.Close()
			if err := ingestHeads(ctx, targets, []redrive.HeldKey{{Queue: queue}}); err != nil {
				return err
			}
			res, err := redrive.NewKeys(env.cat).WithTracerProvider(env.tp).Unpark(ctx, redrive.UnparkParams{Queue: queue, Key: key, DryRun: dryRun,
				MaxRedrives: new(env.maxRedrives(queue)), Target: targets.target, Actor: actorOr(actor)})
			if err != nil {
				return err
			}
			out := unparkJSON{UnparkResult: res, Outcome: "dry_run", Remaining: res.Key.Parked}
			if !dryRun {
				out.Outcome, out.Remaining, err = awaitKey(ctx, env.cat, targets, queue, key, res, wait)
				if err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if asJS {
				if err := report.JSON(w, out); err != nil {
					return err
				}
			} else {
				printUnpark(w, out)
			}
			if out.Outcome == "head_failed" {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&queue, "queue", "", "the queue of the parked key (required)")
	fl.StringVar(&key, "key", "", "the parked key (required)")
	fl.BoolVar(&dryRun, "dry-run", false, "show the head and what waits behind it; change nothing (audited)")
	fl.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the key to flow again (0: do not wait)")
	urlFlag(fl, &url, "")
	brokersFlag(fl, &kbrk)
	actorFlag(cmd, &actor)
	jsonFlag(fl, &asJS, "")
	return cmd
}

// awaitKey waits up to wait for the unparked key to flow again and returns
// the outcome and the number of parked entries left.
func awaitKey(ctx context.Context, cat *catalog.Store, targets *redriveTargets, queue, key string, res redrive.UnparkResult, wait time.Duration) (string, int64, error) {
	if res.Free {
		return "free", 0, nil
	}
	deadline := time.Now().Add(wait)
	for {
		if err := ingestHeads(ctx, targets, []redrive.HeldKey{{Queue: queue}}); err != nil {
			return "", 0, err
		}
		k, err := redrive.NewKeys(cat).HeldKey(ctx, queue, key)
		if err != nil {
			return "", 0, err
		}
		switch {
		case k == nil:
			return "free", 0, nil
		case k.State == redrive.KeyHeld && res.Action == "redrive_head" && k.HeadEventID == res.Key.HeadEventID &&
			k.Head != nil && k.Head.State != catalog.StateRedriven:
			// Failed again, and its dead letter is in the catalog. The
			// consumer holds the key before it settles the dead letter
			// (ordering.go: holdKey): until it lands, the head's latest
			// entry still reads "redriven", and an unpark run then would
			// take the head for one on its way back and wait for it.
			return "head_failed", k.Parked, nil
		}
		if wait == 0 {
			return "sent", k.Parked, nil
		}
		if time.Now().After(deadline) {
			return "moving", k.Parked, nil
		}
		select {
		case <-ctx.Done():
			return "moving", k.Parked, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func printUnpark(w io.Writer, out unparkJSON) {
	k := out.Key
	head := k.HeadEventID
	if k.Head != nil {
		head = fmt.Sprintf("entry #%d (%s)", k.Head.ID, k.HeadEventID)
	}
	what := map[string]string{
		"redrive_head": "redrive the head " + head + " first, then the parked messages one at a time, in order",
		"release_next": "the head " + head + " was decided already (" + string(headState(k)) + "): release the parked messages in order",
		"await_head":   "the head " + head + " is already on its way back: let it through, then the parked messages",
		"nothing":      "nothing to do: the key is already moving (a message is on its way)",
	}[out.Action]
	if out.DryRun {
		fmt.Fprintf(w, "dry run: key %q of %s (%s, %s): would %s; %d parked behind it; nothing changed\n", k.Key, k.Queue, k.Mode, k.State, what, k.Parked)
		return
	}
	fmt.Fprintf(w, "key %q of %s: %s\n", k.Key, k.Queue, what)
	switch out.Outcome {
	case "free":
		fmt.Fprintf(w, "key %q flows again: the head and %d parked messages were processed in order\n", k.Key, k.Parked)
	case "head_failed":
		fmt.Fprintf(w, "the head failed again and was dead-lettered again: key %q stays parked with %d behind it (fix the consumer, or discard the head with a reason, then unpark)\n", k.Key, out.Remaining)
	case "moving":
		fmt.Fprintf(w, "key %q is still moving: %d parked messages left; the consumer releases them one at a time ('lily dlq parked' shows progress)\n", k.Key, out.Remaining)
	case "sent":
		fmt.Fprintf(w, "sent; %d parked messages follow once it is processed ('lily dlq parked' shows progress)\n", out.Remaining)
	}
}

func headState(k redrive.HeldKey) catalog.State {
	if k.Head == nil {
		return "not ingested"
	}
	return k.Head.State
}
