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
		Short: "Work through dead letters: ingest them from a broker into the catalog",
	}
	for _, add := range dlqCommands {
		cmd.AddCommand(add())
	}
	return cmd
}
