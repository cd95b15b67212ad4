package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

func init() { register(newTopologyCmd) }

// rabbitFlags find the configuration and the broker.
type rabbitFlags struct {
	config string
	url    string
}

func (f *rabbitFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "config", "", "Lily configuration file (TOML) with [[queue]] entries of transport \"rabbitmq\" (required)")
	cmd.Flags().StringVar(&f.url, "url", "", "AMQP URL of the broker (default: the config's rabbitmq_url)")
}

// load returns the configuration, its RabbitMQ queue specs and the URL.
func (f *rabbitFlags) load() (lily.Config, []transport.QueueSpec, string, error) {
	if f.config == "" {
		return lily.Config{}, nil, "", usagef("--config FILE is required: the topology is planned from the [[queue]] entries with transport = \"rabbitmq\"")
	}
	c, err := lily.LoadConfig(f.config)
	if err != nil {
		return c, nil, "", err
	}
	var specs []transport.QueueSpec
	for _, q := range c.Queues {
		if q.Transport == lily.TransportRabbitMQ {
			specs = append(specs, q.Spec())
		}
	}
	if len(specs) == 0 {
		return c, nil, "", usagef("--config %s: no [[queue]] has transport = \"rabbitmq\"", f.config)
	}
	url := c.RabbitMQURL
	if f.url != "" {
		url = f.url
	}
	return c, specs, url, nil
}

func newTopologyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Plan, declare and verify the RabbitMQ topology of the configuration",
		Long: `The RabbitMQ topology of DESIGN §6, from the [[queue]] entries with
transport = "rabbitmq": for exchange orders and queue orders.created, the quorum
queue (delivery limit, dead-lettering at-least-once to orders.dlx.v2,
reject-publish), the retry exchange orders.retry.v2 with one TTL bucket queue
per distinct delay (orders.created.retry.v2.1000ms ...) that returns messages
to orders.created only, and the dead-letter queue orders.created.dlq.v2.`,
	}
	cmd.AddCommand(newTopologyPlanCmd(), newTopologyApplyCmd(), newTopologyVerifyCmd())
	return cmd
}

func newTopologyPlanCmd() *cobra.Command {
	var (
		f      rabbitFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Print every exchange, queue, argument and binding that apply would declare (no broker needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, specs, _, err := f.load()
			if err != nil {
				return err
			}
			top, err := rabbitmq.Plan(specs)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), top)
			}
			printTopology(cmd.OutOrStdout(), top)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTopologyApplyCmd() *cobra.Command {
	var f rabbitFlags
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Declare the topology on the broker (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, specs, url, err := f.load()
			if err != nil {
				return err
			}
			tr, err := openRabbit(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer tr.Close()
			if err := tr.Declare(cmd.Context(), &transport.DeclareParams{Queues: specs}); err != nil {
				return err
			}
			top, _ := rabbitmq.Plan(specs)
			fmt.Fprintf(cmd.OutOrStdout(), "declared %d exchanges, %d queues, %d bindings\n", len(top.Exchanges), len(top.Queues), len(top.Bindings))
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newTopologyVerifyCmd() *cobra.Command {
	var (
		f       rabbitFlags
		mgmtURL string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Report every missing or inequivalent exchange, queue, argument and binding; exit 1 on any",
		Long: `Compare the planned topology with the live broker through the management
plugin's HTTP API (AMQP cannot list arguments or bindings). Exits 1 when
anything differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, specs, url, err := f.load()
			if err != nil {
				return err
			}
			top, err := rabbitmq.Plan(specs)
			if err != nil {
				return err
			}
			m, err := rabbitmq.ManagementFor(url)
			if err != nil {
				return usagef("--url: %v", err)
			}
			if mgmtURL != "" {
				m.URL = strings.TrimRight(mgmtURL, "/")
			}
			diffs, err := m.Verify(cmd.Context(), top)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if diffs == nil {
					diffs = []rabbitmq.Difference{}
				}
				if err := writeJSON(out, map[string]any{"differences": diffs, "ok": len(diffs) == 0}); err != nil {
					return err
				}
			} else {
				for _, d := range diffs {
					fmt.Fprintln(out, d.String())
				}
			}
			if len(diffs) > 0 {
				return &ExitError{Code: 1, Msg: fmt.Sprintf("topology verify: %d difference(s) from the plan; 'lily topology apply' declares what is missing (inequivalent queues must be deleted or migrated first)", len(diffs))}
			}
			if !asJSON {
				fmt.Fprintf(out, "topology OK: %d exchanges, %d queues, %d bindings as planned\n", len(top.Exchanges), len(top.Queues), len(top.Bindings))
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&mgmtURL, "management-url", "", "management API URL (default: the broker's host, port 15672, same credentials)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// openRabbit connects to the broker, failing after rabbitConnectTimeout
// instead of retrying forever.
func openRabbit(ctx context.Context, url string) (*rabbitmq.Transport, error) {
	ctx, cancel := context.WithTimeout(ctx, rabbitConnectTimeout)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ (check --url or the config's rabbitmq_url): %w", err)
	}
	return tr, nil
}

// printTopology prints a topology as readable sections.
func printTopology(w io.Writer, top rabbitmq.Topology) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXCHANGE\tTYPE\tDURABLE")
	for _, e := range top.Exchanges {
		fmt.Fprintf(tw, "%s\t%s\t%t\n", e.Name, e.Type, e.Durable)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, q := range top.Queues {
		fmt.Fprintf(w, "QUEUE %s (%s)\n", q.Name, q.Role)
		keys := make([]string, 0, len(q.Arguments))
		for k := range q.Arguments {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := q.Arguments[k]
			if s, ok := v.(string); ok {
				v = fmt.Sprintf("%q", s)
			}
			fmt.Fprintf(w, "  %s = %v\n", k, v)
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BINDING EXCHANGE\tQUEUE\tROUTING KEY")
	for _, b := range top.Bindings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Exchange, b.Queue, b.RoutingKey)
	}
	tw.Flush()
}
