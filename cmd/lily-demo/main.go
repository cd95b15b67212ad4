// Command lily-demo runs 'lily demo' on in-process brokers: Kafka (kfake,
// with a consumer group or a share group), SQS (the goaws emulator) and
// Pub/Sub (the SDK's pstest fake), besides everything 'lily demo' runs.
// It takes the same flags:
//
//	go run ./cmd/lily-demo --transport kafka
//	go run ./cmd/lily-demo --transport kafka --share-group orders-workers
//	go run ./cmd/lily-demo --transport sqs
//	go run ./cmd/lily-demo --transport pubsub
//
// The emulators are test machinery, kept out of the lily binary users
// deploy. Like 'lily demo', it runs its workers as child processes of its
// own binary ('lily-demo demo-worker').
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/cmd/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs lily-demo with args (without the program name) and returns the
// exit code: 0 on success, 1 on failure, 2 on bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "lily-demo:", err)
	var de *demo.ExitError
	switch {
	case errors.As(err, &de):
		return de.Code
	case isUsageError(err):
		return 2
	}
	return 1
}

// newRoot is the demo command with the emulators plugged in, and its
// hidden worker command.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "lily-demo",
		Short:         demo.Short + ", on in-process brokers too",
		Long:          demo.Long(emulators{}),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		// A demo needs no shell completion.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	f := demo.NewFlags(root.Flags(), emulators{})
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		return demo.Run(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &demo.ExitError{Code: 2, Msg: fmt.Sprintf("%v (see '%s --help')", err, c.CommandPath())}
	})
	worker := &cobra.Command{
		Use:    "demo-worker",
		Short:  demo.WorkerShort,
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	w := demo.NewWorkerFlags(worker.Flags())
	worker.RunE = func(cmd *cobra.Command, _ []string) error {
		return demo.RunWorker(cmd.Context(), w, cmd.ErrOrStderr())
	}
	root.AddCommand(worker)
	return root
}

// isUsageError reports cobra's own argument errors (unknown command, wrong
// number of arguments), which are usage errors too.
func isUsageError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.Contains(msg, " arg(s)") ||
		strings.HasPrefix(msg, "unknown flag") || strings.HasPrefix(msg, "required flag")
}
