// Package kfakeserve runs kfake, franz-go's in-process Kafka, as a broker
// of its own process, so that a multi-process benchmark can measure its
// CPU as the broker's (there is no real Kafka cluster on the benchmark
// machine).
package kfakeserve

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Serve runs a one-broker kfake cluster listening on 127.0.0.1:port until
// ctx is done. ready, when not nil, is called with the broker's address
// once it listens. Group session timeouts down to 100ms are allowed, so
// that consumers may use short heartbeats (a quicker first rebalance).
func Serve(ctx context.Context, port int, ready func(addr string)) error {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("start kfake on port %d: %w (is the port taken? pick another with -port)", port, err)
	}
	defer c.Close()
	if ready != nil {
		ready(c.ListenAddrs()[0])
	}
	<-ctx.Done()
	return nil
}
