package nats

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// GiveUpOnPull sends a pull request for one message of queue with the
// given expiry and at once hands its reply subject to giveBackLate for
// window, as a pull that got no answer does. It returns the queue's
// consumer (for its info) and a channel closed when giveBackLate ends.
func (t *Transport) GiveUpOnPull(ctx context.Context, queue string, expires, window time.Duration) (jetstream.Consumer, <-chan struct{}, error) {
	c, b, err := t.consumer(ctx, queue)
	if err != nil {
		return nil, nil, err
	}
	sub, err := t.nc.SubscribeSync(t.nc.NewInbox())
	if err != nil {
		return nil, nil, err
	}
	req, _ := json.Marshal(pullRequest{Batch: 1, Expires: expires})
	if err := t.nc.PublishRequest(jetstream.DefaultAPIPrefix+"CONSUMER.MSG.NEXT."+b.Stream+"."+b.Consumer, sub.Subject, req); err != nil {
		return nil, nil, err
	}
	if err := t.nc.Flush(); err != nil { // the request reaches the server before what the caller publishes next
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); t.giveBackLate(sub, b, 1, window) }()
	return c, done, nil
}
