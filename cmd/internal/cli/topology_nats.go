package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport/nats"
)

// natsPlan returns the streams and consumers of the configuration's nats
// queues; it connects to nothing.
func natsPlan(tc topologyConfig) []nats.ObjectPlan {
	if len(tc.nats) == 0 {
		return nil
	}
	// A transport value that never dials: Plan reads options only.
	return nats.PlanOf(brokers.NATSOptions(tc.cfg), tc.nats)
}

// printNATS prints planned NATS objects as a table.
func printNATS(w io.Writer, ps []nats.ObjectPlan) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NATS\tNAME\tSTREAM\tROLE\tFOR\tSETTINGS")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Kind, p.Name, orDash(p.Stream), p.Role, orDash(p.Queue), sortedPairs(p.Settings, func(v string) string { return v }))
	}
	tw.Flush()
}

// applyNATS declares the nats queues' streams and consumers.
func applyNATS(cmd *cobra.Command, tc topologyConfig) error {
	if err := declareOn(cmd.Context(), tc, (*brokers.Set).NATS, tc.nats); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "declared %d NATS streams and consumers (queues, dead-letter streams, the retry stream)\n", len(natsPlan(tc)))
	return nil
}

// verifyNATS compares the nats queues' streams and consumers with the
// server; it returns the differences and the number of objects planned.
func verifyNATS(ctx context.Context, tc topologyConfig) ([]nats.Difference, int, error) {
	diffs, err := verifyOn(ctx, tc, (*brokers.Set).NATS, (*nats.Transport).Verify, tc.nats)
	return diffs, len(natsPlan(tc)), err
}
