package cli

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// dashboardJSON is the Grafana dashboard of 'lily dashboard'. Every
// panel's query is run against a real Prometheus scraping 'lily serve'
// and 'lily consume' in dashboard_test.go.
//
//go:embed dashboards/lily.json
var dashboardJSON []byte

func init() { register(newDashboardCmd) }

func newDashboardCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "dashboard [--out FILE]",
		Short: "Print a Grafana dashboard (JSON) of Lily's metrics: DLQ depth and age, inflow, retries, breaker, redrives, consumers",
		Long: `Print the Grafana dashboard kept in the repository, for Grafana's
Dashboards > New > Import (pick the Prometheus data source at import) or a
provisioning directory. Its panels query the metrics of docs/metrics.md:
'lily serve' serves the catalog's (lily_dlq_entries, ...,
lily_dlq_retention_seconds) and 'lily consume --metrics ADDR' or a Go
consumer with a lilyprom.Hook the runtime's (lily_messages_total,
lily_retries_at_ack, ...). The $queue variable lists the queues of
lily_dlq_entries; firing Lily alerts ('lily alerts') are annotations.`,
		Example: `  lily dashboard --out /var/lib/grafana/dashboards/lily.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				_, err := cmd.OutOrStdout().Write(dashboardJSON)
				return err
			}
			if err := os.WriteFile(out, dashboardJSON, 0o644); err != nil {
				return fmt.Errorf("dashboard: --out %s: %w", out, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote the Grafana dashboard to %s (import it in Grafana, or put it in a provisioning directory)\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the dashboard to this file instead of standard output")
	return cmd
}
