package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport/pubsub"
)

// pubsubPlan returns the topics and subscriptions of the configuration's
// pubsub queues.
func pubsubPlan(tc topologyConfig) ([]pubsub.Resource, error) {
	var out []pubsub.Resource
	for _, s := range tc.pubsub {
		rs, err := pubsub.PlanFor(brokers.PubSubOptions(tc.cfg), s)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// printPubSub prints planned topics and subscriptions as a table.
func printPubSub(w io.Writer, rs []pubsub.Resource) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSUBSCRIPTION\tROLE\tACK DEADLINE\tDEAD-LETTER POLICY")
	for _, r := range rs {
		dl := "none"
		if r.DeadLetterTopic != "" {
			dl = fmt.Sprintf("%s after %d attempts", r.DeadLetterTopic, r.MaxDeliveryAttempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%ds\t%s\n", r.Topic, r.Subscription, r.Role, r.AckDeadlineSeconds, dl)
	}
	tw.Flush()
}

// applyPubSub creates the pubsub queues' topics and subscriptions.
func applyPubSub(cmd *cobra.Command, tc topologyConfig) error {
	if err := declareOn(cmd.Context(), tc, (*brokers.Set).PubSub, tc.pubsub); err != nil {
		return err
	}
	rs, _ := pubsubPlan(tc)
	fmt.Fprintf(cmd.OutOrStdout(), "declared %d Pub/Sub topics with their subscriptions for %d queues (dead-letter policies set; each dead-letter topic has its own subscription)\n",
		len(rs), len(tc.pubsub))
	return nil
}

// verifyPubSub compares the pubsub queues' plan with the service.
func verifyPubSub(ctx context.Context, tc topologyConfig) ([]pubsub.Difference, int, error) {
	b := brokers.New(tc.cfg, brokers.Options{})
	defer b.Close()
	ps, err := b.PubSub(ctx)
	if err != nil {
		return nil, 0, err
	}
	diffs, n, err := ps.Verify(ctx, tc.pubsub)
	if diffs == nil {
		diffs = []pubsub.Difference{}
	}
	return diffs, n, err
}
