// Package cli implements the lily command line as a library, so that every
// subcommand can be tested with buffers instead of a process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
)

// UsageError reports bad input: a flag with a value outside its range, a
// missing argument. Run prints it and exits with code 2.
type UsageError struct {
	Msg string
}

func (e *UsageError) Error() string { return e.Msg }

// usagef builds a UsageError; the message should name the flag, the value
// and the allowed range.
func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitError makes Run return Code after the command printed its own output,
// e.g. reconcile finding unaccounted messages.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// Run executes the lily command line with args (without the program name),
// writing output to stdout and diagnostics to stderr. It returns the process
// exit code: 0 on success, 1 on failure, 2 on bad usage.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out, errw := newSafeWriter(stdout), newSafeWriter(stderr)
	defer out.Flush()
	defer errw.Flush()
	stdout, stderr = out, errw
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintln(stderr, "lily:", ee.Msg)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "lily:", err)
	var ue *UsageError
	var se *brokers.SettingsError // a broker setting missing from the config and the environment
	if errors.As(err, &ue) || errors.As(err, &se) || isFlagError(err) {
		return 2
	}
	return 1
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "lily",
		Short:         "Lily: bounded retries, dead letters with evidence, and a DLQ you can work through",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// The whole path: 'lily list --help' named a command that does
		// not exist (it is 'lily dlq list').
		return &UsageError{Msg: fmt.Sprintf("%s: %v (see '%s --help')", strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "), err, c.CommandPath())}
	})
	for _, add := range commands {
		root.AddCommand(add())
	}
	return root
}

// commands lists the constructors of the subcommands; each file registers
// its own in an init function so that commands stay one topic per file.
var commands []func() *cobra.Command

func register(f func() *cobra.Command) { commands = append(commands, f) }

// isFlagError reports cobra's own argument errors (unknown command, wrong
// number of arguments), which are usage errors too.
func isFlagError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.Contains(msg, " arg(s)") ||
		strings.HasPrefix(msg, "unknown flag") || strings.HasPrefix(msg, "required flag")
}
