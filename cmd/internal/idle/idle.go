// Package idle stops a consumer once its queue has gone quiet: what
// 'lily consume --exit-when-idle' and the demo's workers do to end when
// every message is acked or dead-lettered.
package idle

import (
	"context"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// StopWhenIdle calls cancel once q has had nothing in flight for idle,
// and for at least twice its longest retry delay: a broker moving a
// message from a bucket back to its queue counts it nowhere for a moment.
// It returns when it cancels or when ctx ends.
func StopWhenIdle(ctx context.Context, cancel func(), counter transport.InFlightCounter, q lily.QueueConfig, idle time.Duration) {
	if bs := q.Policy().Buckets(); len(bs) > 0 {
		idle = max(idle, 2*time.Duration(bs[len(bs)-1])*time.Millisecond+200*time.Millisecond)
	}
	t := time.NewTicker(min(idle/4+time.Millisecond, 100*time.Millisecond))
	defer t.Stop()
	busy := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := counter.InFlight(ctx, q.Name)
			if err != nil || n > 0 {
				busy = time.Now()
			} else if time.Since(busy) >= idle {
				cancel()
				return
			}
		}
	}
}
