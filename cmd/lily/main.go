// Command lily is the operator tool of Lily: see 'lily --help'.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lily-mq/lily/cmd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
