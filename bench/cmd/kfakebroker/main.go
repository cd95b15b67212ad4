// Command kfakebroker runs kfake (franz-go's in-process Kafka) as a broker
// process of its own on a fixed port, until SIGTERM or interrupt: the
// Kafka of a multi-process benchmark, whose CPU can then be read as the
// broker's. matrixbench starts the same server itself (package
// kfakeserve); this command runs it by hand.
//
//	cd bench && go run ./cmd/kfakebroker -port 39092
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lily-mq/lily/bench/internal/kfakeserve"
)

func main() {
	port := flag.Int("port", 39092, "port to listen on, on 127.0.0.1")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := kfakeserve.Serve(ctx, *port, func(addr string) { fmt.Println("kfake listening on", addr) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakebroker:", err)
		os.Exit(1)
	}
}
