package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport/sqs"
)

// printSQSQueues prints planned SQS queues as a table.
func printSQSQueues(w io.Writer, qs []sqs.QueuePlan) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SQS QUEUE\tROLE\tFOR\tATTRIBUTES")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", q.Name, q.Role, q.Queue, sortedPairs(q.Attributes, func(v string) string { return v }))
	}
	tw.Flush()
}

// applySQS declares the sqs queues, their DLQs and redrive policies.
func applySQS(cmd *cobra.Command, tc topologyConfig) error {
	if err := declareOn(cmd.Context(), tc, (*brokers.Set).SQS, tc.sqs); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "declared %d SQS queues and their dead-letter queues (redrive policy maxReceiveCount = delivery_limit + 1)\n", len(tc.sqs))
	return nil
}

// verifySQS compares the sqs queues with the live service; it returns the
// differences and the number of queues planned.
func verifySQS(ctx context.Context, tc topologyConfig) ([]sqs.Difference, int, error) {
	diffs, err := verifyOn(ctx, tc, (*brokers.Set).SQS, (*sqs.Transport).Verify, tc.sqs)
	return diffs, 2 * len(tc.sqs), err
}
