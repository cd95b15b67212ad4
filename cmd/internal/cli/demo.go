package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/cmd/internal/demo"
)

func init() {
	register(newDemoCmd)
	register(newDemoWorkerCmd)
}

// newDemoCmd is 'lily demo' (package demo), with no in-process broker:
// the demos on emulators are cmd/lily-demo's, so that lily links none.
func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: demo.Short,
		Long:  demo.Long(nil),
		Args:  cobra.NoArgs,
	}
	f := demo.NewFlags(cmd.Flags(), nil)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return demoError(demo.Run(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr()))
	}
	return cmd
}

// newDemoWorkerCmd is the demo's worker process, which the demo starts as
// 'lily demo-worker'.
func newDemoWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  demo.WorkerShort,
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	w := demo.NewWorkerFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return demoError(demo.RunWorker(cmd.Context(), w, cmd.ErrOrStderr()))
	}
	return cmd
}

// demoError gives the demo's exit codes to Run: bad input is a
// UsageError (exit 2), a failed check an ExitError.
func demoError(err error) error {
	var de *demo.ExitError
	switch {
	case !errors.As(err, &de):
		return err
	case de.Code == 2:
		return &UsageError{Msg: err.Error()}
	default:
		return &ExitError{Code: de.Code, Msg: de.Msg}
	}
}
