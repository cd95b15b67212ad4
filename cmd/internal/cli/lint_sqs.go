package cli

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/brokers/livelint"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
)

// lintLiveSQS runs the SQS live checks of the configuration's sqs queues;
// false when it has none.
func lintLiveSQS(ctx context.Context, cfg config.Config) ([]lint.Finding, bool, error) {
	has := false
	for _, q := range cfg.Queues {
		has = has || q.Transport == lily.TransportSQS
	}
	if !has {
		return nil, false, nil
	}
	b := brokers.New(cfg, brokers.Options{})
	defer b.Close()
	t, err := b.SQS(ctx)
	if err != nil {
		return nil, true, err
	}
	states, err := livelint.ReadSQS(ctx, cfg, t)
	if err != nil {
		return nil, true, fmt.Errorf("lint --live: %w", err)
	}
	return livelint.CheckSQS(cfg, states), true, nil
}
