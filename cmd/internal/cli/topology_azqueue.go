package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport/azqueue"
)

// printAzQueues prints planned Azure Storage queues as a table.
func printAzQueues(w io.Writer, qs []azqueue.QueuePlan) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AZURE QUEUE\tROLE\tFOR")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", q.Name, q.Role, q.Queue)
	}
	tw.Flush()
}

// applyAzQueue creates the azqueue queues and their dead-letter queues.
func applyAzQueue(cmd *cobra.Command, tc topologyConfig) error {
	if err := declareOn(cmd.Context(), tc, (*brokers.Set).AzQueue, tc.azq); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "declared %d Azure Storage queues and their dead-letter queues\n", len(tc.azq))
	return nil
}

// verifyAzQueue checks that the azqueue queues and their dead-letter
// queues exist; it returns the differences and the number planned.
func verifyAzQueue(ctx context.Context, tc topologyConfig) ([]azqueue.Difference, int, error) {
	diffs, err := verifyOn(ctx, tc, (*brokers.Set).AzQueue, (*azqueue.Transport).Verify, tc.azq)
	return diffs, 2 * len(tc.azq), err
}
