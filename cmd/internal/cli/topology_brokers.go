package cli

import (
	"context"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/transport"
)

// brokerOpener opens one broker's transport from the configuration's
// brokers: a method expression such as (*brokers.Set).SQS.
type brokerOpener[T any] func(*brokers.Set, context.Context) (T, error)

// declareOn declares specs on the broker open returns, connected for the
// call alone.
func declareOn[T transport.Declarer](ctx context.Context, tc topologyConfig, open brokerOpener[T], specs []transport.QueueSpec) error {
	b := brokers.New(tc.cfg, brokers.Options{})
	defer b.Close()
	t, err := open(b, ctx)
	if err != nil {
		return err
	}
	return t.Declare(ctx, &transport.DeclareParams{Queues: specs})
}

// verifyOn compares specs with the broker open returns, connected for the
// call alone, through verify (a method expression such as
// (*sqs.Transport).Verify); no difference is an empty list, never nil
// (JSON: []).
func verifyOn[T, D any](ctx context.Context, tc topologyConfig, open brokerOpener[T],
	verify func(T, context.Context, []transport.QueueSpec) ([]D, error), specs []transport.QueueSpec) ([]D, error) {
	b := brokers.New(tc.cfg, brokers.Options{})
	defer b.Close()
	t, err := open(b, ctx)
	if err != nil {
		return nil, err
	}
	diffs, err := verify(t, ctx, specs)
	if diffs == nil {
		diffs = []D{}
	}
	return diffs, err
}
