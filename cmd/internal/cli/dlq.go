package cli

import (
	"github.com/spf13/cobra"
)

func init() { register(newDLQCmd) }

// dlqCommands lists the constructors of the 'lily dlq' subcommands; each
// file adds its own in an init function.
var dlqCommands []func() *cobra.Command

func registerDLQ(f func() *cobra.Command) { dlqCommands = append(dlqCommands, f) }

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Work through dead letters: inspect, group, search, triage, fix, redrive, discard (every command below)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("dlq: unknown command %q (see 'lily dlq --help')", args[0])
			}
			return cmd.Help()
		},
	}
	for _, add := range dlqCommands {
		cmd.AddCommand(add())
	}
	return cmd
}
