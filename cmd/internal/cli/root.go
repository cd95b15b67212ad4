// Package cli implements the lily command line as a library, so that every
// subcommand can be tested with buffers instead of a process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/redrive"
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
	// An invalid configuration, or a job ID no job has, is bad input too
	// (exit 2), not a finding (exit 1): the README's exit-code convention.
	if errors.As(err, &ue) || errors.As(err, &se) || isFlagError(err) || errors.Is(err, lily.ErrInvalidConfig) || errors.Is(err, redrive.ErrNoJob) {
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
		// The whole path: the command's own name alone (list) named one that does
		// not exist (it is 'lily dlq list').
		return &UsageError{Msg: fmt.Sprintf("%s: %v (see '%s --help')", strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "), flagValueError(err), c.CommandPath())}
	})
	for _, add := range commands {
		root.AddCommand(add())
	}
	addExamples(root)
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

// flagValueError says what a flag's value should have been, in place of
// the parser's words ('invalid argument "abc" for "--rate" flag:
// strconv.ParseFloat: parsing "abc": invalid syntax').
func flagValueError(err error) error {
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) {
		return err
	}
	name := "--" + iv.GetFlag().Name
	want := "a value of type " + iv.GetFlag().Value.Type()
	switch iv.GetFlag().Value.Type() {
	case "float64", "float32":
		want = "a number, e.g. 50 or 2.5"
	case "int", "int64", "int32", "uint", "uint64", "uint32":
		want = "a whole number, e.g. 100"
	case "bool":
		want = "true or false"
	case "duration":
		want = "a duration, e.g. 90s, 15m or 2h"
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
		return fmt.Errorf("%s %s: out of range; want %s", name, iv.GetValue(), want)
	}
	return fmt.Errorf("%s %q: want %s", name, iv.GetValue(), want)
}
